// Command fencing is a tiny downstream key-value server that only accepts
// writes from the current holder of a Chubby lock: the example of
// sequencers and lock-delay in use.
//
// A lock holder may lose its lock without knowing it (its session expired
// while it was paused, or partitioned away) and then send a late write.
// Chubby gives two defences, and this server uses both:
//
//   - Sequencers. A holder gets its lock's sequencer from Acquire and sends
//     it, in its printable form, with every write:
//
//     chubby-seq:v1:<E|S>:<lock_generation>:<instance>:<path>
//
//     E or S is the lock mode (exclusive or shared), lock_generation counts
//     how often the lock went from free to held, instance tells this node
//     from a deleted-and-recreated one of the same path. client.ParseSequencer
//     and client.FormatSequencer convert it.
//
//   - Fencing tokens. The server remembers the highest (instance,
//     lock_generation) it has accepted for its lock. A write naming an older
//     one is refused at once, without asking the cell: the lock has moved
//     since. A write naming the same or a newer one is checked with the
//     cell (Client.CheckSequencer), which knows whether that lock
//     generation is still held, and then becomes the new mark.
//
//   - Lock-delay. When a holder's session ends without releasing (it
//     crashed, or was cut off), the cell keeps the lock from everyone for
//     the holder's lock-delay, so that writes already in flight from the
//     dead holder land before the next holder starts. It is chosen per
//     Acquire (client.LockOptions.LockDelay): 0 means the cell's default
//     of 15 s, client.NoLockDelay none, at most 60 s. The check above
//     and the write that follows are not atomic; lock-delay is what covers
//     that window for servers that cannot check at all.
//
// Usage:
//
//	fencing --cell 127.0.0.1:7000 --lock /fencing/leader --listen 127.0.0.1:8080
//
// The HTTP interface:
//
//	PUT /kv/KEY   body: the value; header Chubby-Sequencer: the sequencer.
//	              204 written; 400 no or malformed sequencer, or one for
//	              another lock or not exclusive; 409 stale sequencer (the
//	              body says why); 503 the cell could not be asked.
//	GET /kv/KEY   200 with the value, or 404.
//
// A holder, from the shell (see chubbyfs lock):
//
//	chubbyfs lock --lock-delay 5s /fencing/leader -- sh -c \
//	  'curl -X PUT -H "Chubby-Sequencer: $CHUBBY_SEQUENCER" -d v1 http://127.0.0.1:8080/kv/k'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// HeaderSequencer is the request header that carries the writer's
// sequencer, in its printable form.
const HeaderSequencer = "Chubby-Sequencer"

// maxValue bounds one value (the server is an example, not a database).
const maxValue = 1 << 20

// checker asks the cell whether a sequencer is current; *client.Client is
// one.
type checker interface {
	CheckSequencer(ctx context.Context, seq *chubby.Sequencer) (valid bool, reason string, err error)
}

// fence is the mark of the newest lock tenure a server has accepted.
type fence struct {
	instance, generation int64
}

// older reports whether seq names a tenure before f.
func (f fence) older(seq *chubby.Sequencer) bool {
	if seq.Instance != f.instance {
		return seq.Instance < f.instance
	}
	return seq.LockGeneration < f.generation
}

// Server is the key-value store. It accepts writes only with a current
// exclusive sequencer of its lock.
type Server struct {
	lock  string  // the path of the lock whose holder may write
	cell  checker // asks the cell
	check time.Duration

	mu    sync.Mutex
	mark  fence // highest tenure accepted so far
	store map[string][]byte

	// Checks counts the calls made to the cell; Fenced counts writes
	// refused by the mark alone, without a call. Tests and /metrics-style
	// curiosity read them.
	Checks, Fenced atomic.Int64
}

// NewServer returns a server for the lock at path, checking sequencers
// with c.
func NewServer(path string, c checker) *Server {
	return &Server{lock: path, cell: c, check: 5 * time.Second, store: make(map[string][]byte)}
}

// ServeHTTP serves GET and PUT on /kv/KEY.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, ok := strings.CutPrefix(r.URL.Path, "/kv/")
	if !ok || key == "" {
		http.NotFound(w, r)
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.mu.Lock()
		v, ok := s.store[key]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(v)
	case http.MethodPut:
		v, err := io.ReadAll(io.LimitReader(r.Body, maxValue+1))
		if err != nil || len(v) > maxValue {
			http.Error(w, "value unreadable or too large", http.StatusBadRequest)
			return
		}
		code, msg := s.put(r.Context(), r.Header.Get(HeaderSequencer), key, v)
		if code != http.StatusNoContent {
			http.Error(w, msg, code)
			return
		}
		w.WriteHeader(code)
	default:
		w.Header().Set("Allow", "GET, PUT")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// put stores v under key if text is a current exclusive sequencer of the
// server's lock, and returns the HTTP status and a reason.
func (s *Server) put(ctx context.Context, text, key string, v []byte) (int, string) {
	if text == "" {
		return http.StatusBadRequest, "no " + HeaderSequencer + " header"
	}
	seq, err := client.ParseSequencer(text)
	if err != nil {
		return http.StatusBadRequest, client.Describe(err)
	}
	if seq.Path != s.lock || seq.Mode != chubby.LockMode_EXCLUSIVE {
		return http.StatusBadRequest, fmt.Sprintf("sequencer is not for an exclusive lock on %s", s.lock)
	}
	// The fencing token first: an older tenure is refused without a call.
	s.mu.Lock()
	mark := s.mark
	s.mu.Unlock()
	if mark.older(seq) {
		s.Fenced.Add(1)
		return http.StatusConflict, fmt.Sprintf("stale sequencer: lock generation %d (instance %d) is older than %d (instance %d)",
			seq.LockGeneration, seq.Instance, mark.generation, mark.instance)
	}
	// The same or a newer tenure: is it still held?
	cctx, cancel := context.WithTimeout(ctx, s.check)
	defer cancel()
	s.Checks.Add(1)
	valid, reason, err := s.cell.CheckSequencer(cctx, seq)
	if err != nil {
		return http.StatusServiceUnavailable, "cannot check the sequencer: " + client.Describe(err)
	}
	if !valid {
		return http.StatusConflict, "stale sequencer: " + reason
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A newer tenure may have written while we asked: then this one is over.
	if s.mark.older(seq) {
		s.Fenced.Add(1)
		return http.StatusConflict, fmt.Sprintf("stale sequencer: lock generation %d was superseded by %d while it was checked",
			seq.LockGeneration, s.mark.generation)
	}
	s.mark = fence{seq.Instance, seq.LockGeneration}
	s.store[key] = v
	return http.StatusNoContent, ""
}

// Put writes value under key on the fencing server at base (http://host:port)
// with the sequencer seq; it is what a lock holder calls. A refusal is an
// error with the server's reason.
func Put(ctx context.Context, base, key, value string, seq *chubby.Sequencer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/kv/"+key, strings.NewReader(value))
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	req.Header.Set(HeaderSequencer, client.FormatSequencer(seq))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &RefusedError{Status: resp.StatusCode, Reason: strings.TrimSpace(string(body))}
	}
	return nil
}

// RefusedError is a write the server refused.
type RefusedError struct {
	Status int
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused (%d): %s", e.Status, e.Reason)
}

func main() {
	klog.SetOutput(io.Discard)
	cell := flag.String("cell", "", "the cell's replica addresses, comma separated (default: $CHUBBY_CELL, else "+client.DefaultAddr+")")
	lock := flag.String("lock", "/fencing/leader", "the lock whose exclusive holder may write")
	listen := flag.String("listen", "127.0.0.1:8080", "the address to serve HTTP on")
	flag.Parse()
	if err := serve(*cell, *lock, *listen); err != nil {
		log.Fatalf("fencing: %v", err)
	}
}

func serve(cell, lock, listen string) error {
	if err := client.ValidatePath(lock); err != nil {
		return fmt.Errorf("--lock: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := client.Config{}
	if cell != "" {
		addrs, err := client.ParseAddrs(cell)
		if err != nil {
			return fmt.Errorf("--cell: %w", err)
		}
		cfg.Addrs = addrs
	}
	c, err := client.Connect(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer c.Close()
	srv := &http.Server{Addr: listen, Handler: NewServer(lock, c), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	log.Printf("fencing: serving %s for the holder of %s", listen, lock)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
