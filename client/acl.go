package client

import (
	"context"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/rpc"
	"github.com/cloudwego/kitex/client/callopt"
)

// Identity is who the cell takes this client for.
type Identity struct {
	// Principal is the common name of the client's certificate, or
	// "anonymous" without one (and always on a cell without TLS).
	Principal string
	// TLS says the connection is TLS.
	TLS bool
}

// WhoAmI asks the cell which principal it takes this client for: the one
// every ACL check of its sessions uses. Retried (a read).
func (c *Client) WhoAmI(ctx context.Context) (Identity, error) {
	return c.WhoAmIAsync(ctx).Wait(ctx)
}

// WhoAmIAsync is the asynchronous form of WhoAmI.
func (c *Client) WhoAmIAsync(ctx context.Context) *rpc.Future[Identity] {
	return rpc.Go(ctx, func(ctx context.Context) (Identity, error) {
		r, err := call(ctx, c, callSpec{op: "whoami", class: retrySafe, timeout: c.cfg.CallTimeout},
			func(ctx context.Context, o ...callopt.Option) (*chubby.WhoAmIResponse, error) {
				return c.kc.WhoAmI(ctx, o...)
			})
		if err != nil {
			return Identity{}, err
		}
		return Identity{Principal: r.GetPrincipal(), TLS: r.GetTls()}, nil
	})
}

// ACL names a node's three access-control lists: each is the name of a
// file in /acl listing the principals that hold the right ("" grants it to
// everybody). See chubby.ACLNames for which call needs which right.
type ACL struct {
	Read, Write, ChangeACL string
}

// ACLOf returns the ACL names a Stat carries (all empty from a cell that
// predates ACLs).
func ACLOf(st *chubby.Stat) ACL {
	a := st.GetAcl()
	if a == nil {
		return ACL{}
	}
	return ACL{Read: a.ReadAcl, Write: a.WriteAcl, ChangeACL: a.ChangeAcl}
}

// SetACL replaces the node's ACL names (its principal needs the node's
// change_acl right) and returns the new Stat, whose acl_generation went up
// by one. With IfGeneration it is a compare-and-swap on the acl_generation.
// Exactly-once, like SetContents.
func (h *Handle) SetACL(ctx context.Context, acl ACL, opts ...SetOption) (*chubby.Stat, error) {
	return handleDo(h, "set-acl", ctx, h.setACLCall(acl, opts...))
}

// SetACLAsync is the asynchronous form of SetACL.
func (h *Handle) SetACLAsync(ctx context.Context, acl ACL, opts ...SetOption) *rpc.Future[*chubby.Stat] {
	return handleGo(h, "set-acl", ctx, h.setACLCall(acl, opts...))
}

func (h *Handle) setACLCall(acl ACL, opts ...SetOption) func(context.Context) (*chubby.Stat, error) {
	return func(ctx context.Context) (*chubby.Stat, error) {
		req := &chubby.SetACLRequest{Handle: h.h, Acl: &chubby.ACLNames{ReadAcl: acl.Read, WriteAcl: acl.Write, ChangeAcl: acl.ChangeACL}}
		for _, o := range opts {
			if o.expectedGeneration != nil {
				req.ExpectedAclGeneration = o.expectedGeneration
			}
		}
		// The Stat changes (acl, acl_generation): our copy goes now and
		// again when the change is done, as for a write.
		h.s.cache.drop(h.Path())
		defer h.s.cache.drop(h.Path())
		st, err := sessionCall(ctx, h.s, h.s.onceSpec("set-acl", h.Path(), func(r *chubby.RequestID) { req.Rid = r }),
			func(ctx context.Context, o ...callopt.Option) (*chubby.Stat, error) {
				return h.s.c.kc.SetACL(ctx, req, o...)
			})
		if err == nil {
			h.remember(st)
		}
		return st, err
	}
}
