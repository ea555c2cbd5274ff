//go:build !linux

package rpc

import (
	"net"

	"github.com/cloudwego/kitex/pkg/remote"
	knetpoll "github.com/cloudwego/kitex/pkg/remote/trans/netpoll"
)

// acceptGuarded: netpoll's own listener serves here and admits every
// connection, so there is no per-address cap on plaintext servers and no
// slot to free.
const acceptGuarded = false

// transServerFactory is Kitex's netpoll transport unchanged: the listener
// that keeps its descriptor number reserved until netpoll is done with it
// (listener_linux.go) is written for Linux only, so elsewhere stopping a
// server still closes the number netpoll's own listener holds more than
// once, and connections are not capped per address.
type transServerFactory struct {
	guard *connGuard // unused here
	lc    *lifecycle // told when Kitex hands over the listener
}

func (f transServerFactory) NewTransServer(opt *remote.ServerOption, h remote.ServerTransHandler) remote.TransServer {
	return bootReporter{knetpoll.NewTransServerFactory().NewTransServer(opt, h), f.lc}
}

// bootReporter tells its lifecycle when Kitex hands it the listener.
type bootReporter struct {
	remote.TransServer
	lc *lifecycle
}

func (b bootReporter) BootstrapServer(ln net.Listener) error {
	b.lc.boot()
	return b.TransServer.BootstrapServer(ln)
}

// checkListener accepts any listener; netpoll refuses the ones it cannot
// serve when the server starts.
func checkListener(net.Listener) error { return nil }
