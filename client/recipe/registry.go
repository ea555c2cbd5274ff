package recipe

import (
	"bytes"
	"context"
	"errors"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Registry is a service registry in a directory: each instance of service
// NAME is an ephemeral file DIR/NAME/INSTANCE whose content is the
// instance's address (any bytes), owned by the session that registered
// it. List reads the instances; Watch delivers the set at each change,
// learnt from the directory's child events (added, removed, modified).
//
// Failure semantics:
//
//   - An instance that dies (crash, kill -9, cut off) leaves the registry
//     when its session expires, about one lease after a kill: the cell
//     deletes its file, and watchers see it removed. Until then it is
//     listed: a client must still cope with an instance that does not
//     answer.
//   - An instance whose session is in jeopardy stays registered; if the
//     session comes back it was never gone, if it expires it is removed.
//     A restarted instance that registers under its old name gets EXISTS
//     until the old session has expired; use a new name, or retry.
//   - A master failover changes nothing: the files, the watchers' handles
//     and their events survive, and watchers keep delivering changes.
//   - Deleting DIR/NAME ends its watchers with ErrRegistryGone.
type Registry struct {
	s   *client.Session
	dir string
}

// ErrRegistryGone is returned by RegistryWatcher.Next when the service's
// directory was deleted.
var ErrRegistryGone = errors.New("recipe: the service's directory was deleted")

// ErrWatcherClosed is returned by RegistryWatcher.Next after Close.
var ErrWatcherClosed = errors.New("recipe: registry watcher closed")

// ServiceInstance is one registered instance of a service.
type ServiceInstance struct {
	Name  string           // the instance's name
	Addr  []byte           // its address, as registered
	Owner chubby.SessionID // the session that registered it
}

// NewRegistry returns the registry in directory dir (created with its
// parents as needed) of session s.
func NewRegistry(s *client.Session, dir string) (*Registry, error) {
	if s == nil {
		return nil, coordInvalid("registry", dir, "no session")
	}
	if err := client.ValidatePath(dir); err != nil {
		return nil, &client.OpError{Op: "registry", Path: dir, Err: err}
	}
	return &Registry{s: s, dir: dir}, nil
}

// service returns the directory of service name, checking the name.
func (r *Registry) service(op, name string) (string, error) {
	if err := coordName(op, r.dir, name); err != nil {
		return "", err
	}
	return path.Join(r.dir, name), nil
}

// Registration is one instance registered by this session.
type Registration struct {
	s        *client.Session
	path     string
	instance int64 // the file's instance number, so Deregister deletes only it
}

// Path returns the instance's file.
func (g *Registration) Path() string { return g.path }

// Register registers instance (a name, as for name) of service name at
// addr (at most chubby.MAX_CONTENT_BYTES bytes), in one call: the file
// DIR/NAME/INSTANCE, ephemeral, with the missing directories made
// permanent. It stays registered while the session lives, or until
// Deregister. An instance name already registered is EXISTS.
func (r *Registry) Register(ctx context.Context, name, instance string, addr []byte) (*Registration, error) {
	dir, err := r.service("registry register", name)
	if err != nil {
		return nil, err
	}
	if err := coordName("registry register", dir, instance); err != nil {
		return nil, err
	}
	if len(addr) > chubby.MAX_CONTENT_BYTES {
		return nil, coordInvalid("registry register", dir, "address of %d bytes, at most %d allowed", len(addr), chubby.MAX_CONTENT_BYTES)
	}
	p := path.Join(dir, instance)
	st, err := r.s.CreateFile(ctx, p, addr, client.CreateOptions{Ephemeral: true, MakeParents: true})
	if err != nil {
		return nil, err
	}
	return &Registration{s: r.s, path: p, instance: st.GetInstance()}, nil
}

// Deregister removes the registration (if it is still this one's file).
func (g *Registration) Deregister(ctx context.Context) error {
	_, err := g.s.Multi(ctx, []client.Cmp{client.CmpInstance(g.path, g.instance)}, []client.Op{client.OpDelete(g.path, false)})
	return err
}

// List returns the instances of service name, sorted by name; none if the
// service has no directory. Instances are read in parallel.
func (r *Registry) List(ctx context.Context, name string) ([]ServiceInstance, error) {
	dir, err := r.service("registry list", name)
	if err != nil {
		return nil, err
	}
	h, err := r.s.Open(ctx, dir, client.OpenOptions{})
	if client.IsCode(err, chubby.ErrorCode_NOT_FOUND) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer coordClose(ctx, h)
	entries, err := h.ReadDir(ctx)
	if err != nil {
		return nil, err
	}
	reads, err := readInstances(ctx, r.s, dir, entries)
	if err != nil {
		return nil, err
	}
	var out []ServiceInstance
	for _, rd := range reads {
		if rd.found {
			out = append(out, rd.inst)
		}
	}
	return out, nil
}

// instanceRead is one instance file read.
type instanceRead struct {
	inst      ServiceInstance
	instance  int64 // the file's instance number
	gen       int64 // its content generation
	found     bool  // false: it went between the listing and the read
	directory bool  // not an instance: skipped
}

// readParallel bounds the reads readInstances has in flight.
const readParallel = 16

// readInstances reads the instance files of entries in dir, in parallel,
// in the entries' order.
func readInstances(ctx context.Context, s *client.Session, dir string, entries []*chubby.DirEntry) ([]instanceRead, error) {
	out := make([]instanceRead, len(entries))
	errs := make([]error, len(entries))
	sem := make(chan struct{}, readParallel)
	var wg sync.WaitGroup
	for i, e := range entries {
		if e.GetStat().GetKind() == chubby.NodeKind_DIRECTORY {
			out[i].directory = true
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], errs[i] = readInstance(ctx, s, path.Join(dir, e.GetName()), e.GetName())
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// readInstance reads the instance file p (open, read, close).
func readInstance(ctx context.Context, s *client.Session, p, name string) (instanceRead, error) {
	h, err := s.Open(ctx, p, client.OpenOptions{})
	if client.IsCode(err, chubby.ErrorCode_NOT_FOUND) {
		return instanceRead{}, nil
	}
	if err != nil {
		return instanceRead{}, err
	}
	defer coordClose(ctx, h)
	data, st, err := h.GetContentsAndStat(ctx)
	if client.IsCode(err, chubby.ErrorCode_HANDLE_INVALID) {
		return instanceRead{}, nil
	}
	if err != nil {
		return instanceRead{}, err
	}
	return instanceRead{inst: ServiceInstance{Name: name, Addr: data, Owner: st.GetEphemeralOwner()},
		instance: st.GetInstance(), gen: st.GetContentGeneration(), found: true}, nil
}

// RegistryChange is the set of a service's instances after a change, and
// what changed.
type RegistryChange struct {
	Instances []ServiceInstance // every instance now, sorted by name
	Added     []string          // instances new since the last change (the first: all)
	Removed   []string          // instances gone
	Modified  []string          // instances whose address changed, or that were registered again
}

// Watch opens the directory of service name (creating it and its parents
// if missing) to follow its instances: see RegistryWatcher. Close the
// watcher when done.
func (r *Registry) Watch(ctx context.Context, name string) (*RegistryWatcher, error) {
	dir, err := r.service("registry watch", name)
	if err != nil {
		return nil, err
	}
	if _, err := r.s.Mkdir(ctx, dir, client.MkdirOptions{Parents: true}); err != nil {
		return nil, err
	}
	h, err := r.s.Open(ctx, dir, client.OpenOptions{EventMask: chubby.EVENT_MASK_CHILD_ADDED |
		chubby.EVENT_MASK_CHILD_REMOVED | chubby.EVENT_MASK_CHILD_MODIFIED | chubby.EVENT_MASK_HANDLE_INVALID})
	if err != nil {
		return nil, err
	}
	return &RegistryWatcher{s: r.s, dir: dir, h: h, known: map[string]instanceRead{}}, nil
}

// RegistryWatcher follows a service's instances. Its first Next returns
// the instances now (all Added); each later Next waits for the next
// change and returns the set after it. A slow caller does not fall
// behind: each Next reads the set as it is then, so changes that came
// and went meanwhile are skipped. Only new or modified instances are
// read again; the listing comes from the session's cache when it can.
// Not safe for concurrent use; one goroutine calls Next.
type RegistryWatcher struct {
	s   *client.Session
	dir string
	h   *client.Handle

	started bool
	closed  bool
	gone    bool
	known   map[string]instanceRead // by instance name
}

// Next returns the instances now (first call) or after the next change.
// It fails with ErrRegistryGone once the directory is deleted, with an
// error wrapping the session's Err when the session ends, with
// ErrWatcherClosed after Close, and with ctx's error when ctx ends.
func (w *RegistryWatcher) Next(ctx context.Context) (RegistryChange, error) {
	if w.closed {
		return RegistryChange{}, ErrWatcherClosed
	}
	for {
		if w.started {
			if err := w.wait(ctx); err != nil {
				return RegistryChange{}, err
			}
		}
		if w.gone {
			return RegistryChange{}, ErrRegistryGone
		}
		ch, err := w.sync(ctx)
		if err != nil {
			return RegistryChange{}, err
		}
		if !w.started || len(ch.Added)+len(ch.Removed)+len(ch.Modified) > 0 {
			w.started = true
			return ch, nil
		}
	}
}

// wait blocks until an event arrives, and takes those queued behind it.
func (w *RegistryWatcher) wait(ctx context.Context) error {
	select {
	case ev, ok := <-w.h.Events():
		if !ok {
			return w.ended()
		}
		w.gone = w.gone || ev.Kind == chubby.EventKind_HANDLE_INVALID
	case <-ctx.Done():
		return ctx.Err()
	}
	for range client.HandleEventBuffer {
		select {
		case ev, ok := <-w.h.Events():
			if !ok {
				return nil
			}
			w.gone = w.gone || ev.Kind == chubby.EventKind_HANDLE_INVALID
		default:
			return nil
		}
	}
	return nil
}

// ended says why the event channel closed.
func (w *RegistryWatcher) ended() error {
	if w.gone {
		return nil
	}
	if w.closed {
		return ErrWatcherClosed
	}
	return coordEventsEnded(w.h)
}

// sync lists the directory, reads what is new or modified, and returns
// the set with what changed since the last sync.
func (w *RegistryWatcher) sync(ctx context.Context) (RegistryChange, error) {
	entries, err := w.h.ReadDir(ctx)
	if client.IsCode(err, chubby.ErrorCode_HANDLE_INVALID) {
		w.gone = true
		return RegistryChange{}, ErrRegistryGone
	}
	if err != nil {
		return RegistryChange{}, err
	}
	var stale []*chubby.DirEntry
	for _, e := range entries {
		k, ok := w.known[e.GetName()]
		if !ok || k.instance != e.GetStat().GetInstance() || k.gen != e.GetStat().GetContentGeneration() {
			stale = append(stale, e)
		}
	}
	reads, err := readInstances(ctx, w.s, w.dir, stale)
	if err != nil {
		return RegistryChange{}, err
	}
	return w.apply(entries, stale, reads), nil
}

// apply updates known from a listing and the reads of its stale entries,
// and returns the change.
func (w *RegistryWatcher) apply(entries, stale []*chubby.DirEntry, reads []instanceRead) RegistryChange {
	var ch RegistryChange
	listed := map[string]bool{}
	for _, e := range entries {
		listed[e.GetName()] = true
	}
	for name := range w.known {
		if !listed[name] {
			ch.Removed = append(ch.Removed, name)
			delete(w.known, name)
		}
	}
	for i, e := range stale {
		name, rd := e.GetName(), reads[i]
		old, had := w.known[name]
		switch {
		case rd.directory:
			continue
		case !rd.found && had:
			ch.Removed = append(ch.Removed, name)
			delete(w.known, name)
		case !rd.found:
		case !had:
			ch.Added = append(ch.Added, name)
			w.known[name] = rd
		case old.instance != rd.instance || !bytes.Equal(old.inst.Addr, rd.inst.Addr):
			ch.Modified = append(ch.Modified, name)
			w.known[name] = rd
		default:
			w.known[name] = rd // rewritten with the same address
		}
	}
	for _, k := range w.known {
		ch.Instances = append(ch.Instances, k.inst)
	}
	slices.SortFunc(ch.Instances, func(a, b ServiceInstance) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(ch.Added)
	slices.Sort(ch.Removed)
	slices.Sort(ch.Modified)
	return ch
}

// Close closes the watcher's handle; Next then fails with ErrWatcherClosed.
func (w *RegistryWatcher) Close(ctx context.Context) error {
	if w.closed {
		return nil
	}
	w.closed = true
	err := w.h.Close(ctx)
	if w.gone && client.IsCode(err, chubby.ErrorCode_HANDLE_INVALID) {
		return nil
	}
	return err
}
