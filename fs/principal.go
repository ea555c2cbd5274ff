package fs

// Anonymous is the principal of a client without a certificate (and of
// every client of a cell without TLS).
const Anonymous = "anonymous"
