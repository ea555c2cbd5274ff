package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/chubbygo/chubby/client"
)

// withLongSession runs fn, for a command that runs until interrupted
// (election follow, registry watch, the holding commands), with a fresh
// session made under the setup bound: the global --timeout, else
// watchSetupTimeout. fn gets ctx, which SIGINT and SIGTERM end, and
// setupCtx, which also ends when the setup bound passes. The session (and
// client) are closed afterwards. verb and p label failures to set up.
func (a *app) withLongSession(ctx context.Context, verb, p string, fn func(ctx, setupCtx context.Context, s *client.Session) error) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	setup := a.timeout
	if setup <= 0 {
		setup = watchSetupTimeout
	}
	setupCtx, cancel := context.WithTimeout(ctx, setup)
	defer cancel()
	c, err := a.connect(setupCtx)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.NewSession(setupCtx)
	if err != nil {
		return refused(verb, p, err)
	}
	defer func() {
		cctx, cancel := releaseContext(ctx)
		defer cancel()
		_ = s.Close(cctx)
	}()
	return fn(ctx, setupCtx, s)
}

// sessionLost is the exit-1 error of a long-running command whose
// session ended.
func sessionLost(verb, p string, s *client.Session) error {
	return &exitError{code: exitRefused, msg: fmt.Sprintf("%s %s: session lost: %s", verb, p, client.Describe(s.Err()))}
}

// Commands that make something owned by their session (mkdir
// --ephemeral, registry register) are useful only while the session
// lives, and a command's session ends when chubbyfs exits. So they hold
// it: they make the node, say so on stderr, and keep the session alive
// until SIGINT or SIGTERM (exit 0: the session is closed, and what it owns
// goes at once) or until the session is lost (exit 1). The global
// --timeout bounds only connecting and making the node.

// hold runs create on a fresh session under the setup bound, then keeps
// the session until a signal or its end. what names the thing held, for
// the message; verb and p label failures.
func (a *app) hold(ctx context.Context, verb, p, what string, create func(context.Context, *client.Session) error) error {
	return a.withLongSession(ctx, verb, p, func(ctx, setupCtx context.Context, s *client.Session) error {
		if err := create(setupCtx, s); err != nil {
			return refused(verb, p, err)
		}
		fmt.Fprintf(a.stderr, "chubbyfs: holding %s while this session lives; Ctrl-C to end it\n", what)
		select {
		case <-ctx.Done():
			return nil
		case <-s.Done():
			return sessionLost(verb, p, s)
		}
	})
}
