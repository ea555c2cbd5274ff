package fs

import (
	"github.com/chubbygo/chubby/gen/chubby"
)

// Anonymous is the principal of a client without a certificate (and of
// every client of a cell without TLS).
const Anonymous = "anonymous"

// ValidPrincipal checks a principal's name: 1..chubby.MAX_PRINCIPAL_BYTES
// bytes of [A-Za-z0-9._@:/+=-] (no spaces, no '#', no '*', which mean
// something in an ACL file). Anonymous is a valid name. A violation is an
// INVALID_ARGUMENT *chubby.ChubbyError.
func ValidPrincipal(p string) error {
	return asError(checkPrincipal(p))
}

func checkPrincipal(p string) *chubby.ChubbyError {
	if p == "" {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "principal is empty")
	}
	if len(p) > int(chubby.MAX_PRINCIPAL_BYTES) {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "principal is %d bytes, more than %d", len(p), chubby.MAX_PRINCIPAL_BYTES)
	}
	for i := 0; i < len(p); i++ {
		if !principalByte(p[i]) {
			return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "byte %q at %d of principal %q is not one of [A-Za-z0-9._@:/+=-]", p[i], i, p)
		}
	}
	return nil
}

func principalByte(b byte) bool {
	switch b {
	case '@', ':', '/', '+', '=':
		return true
	}
	return nameByte(b)
}
