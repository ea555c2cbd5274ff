package recipe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

func init() {
	// An instance (dir, name, instance, addr) that registers, says
	// "registered" and stays until killed.
	children["registry-instance"] = func(args []string) int {
		ctx := context.Background()
		r, err := NewRegistry(coordChildSession(ctx), args[0])
		if err != nil {
			return coordChildFail("registry", err)
		}
		if _, err := r.Register(ctx, args[1], args[2], []byte(args[3])); err != nil {
			return coordChildFail("register", err)
		}
		fmt.Println("registered")
		select {}
	}
}

// instancesText is a set of instances as "name=addr" words, sorted.
func instancesText(is []ServiceInstance) string {
	var words []string
	for _, i := range is {
		words = append(words, i.Name+"="+string(i.Addr))
	}
	return strings.Join(words, " ")
}

// nextChange is the watcher's next change, within d.
func nextChange(t *testing.T, w *RegistryWatcher, d time.Duration) RegistryChange {
	t.Helper()
	ch, err := w.Next(coordCtx(t, d))
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	return ch
}

// awaitInstances reads changes until the set is want (bounded).
func awaitInstances(t *testing.T, w *RegistryWatcher, want string, within time.Duration) RegistryChange {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ch := nextChange(t, w, time.Until(deadline))
		if instancesText(ch.Instances) == want {
			return ch
		}
		if time.Now().After(deadline) {
			t.Fatalf("instances %q, want %q", instancesText(ch.Instances), want)
		}
	}
}

// TestRegistry: Register, List, Deregister; a watcher gets the set first,
// then each change with what was added, removed or modified; a closed
// session's instance leaves.
func TestRegistry(t *testing.T) {
	cell := coordCell(t)
	s1, s2, s3 := coordSession(t, cell.Addr), coordSession(t, cell.Addr), coordSession(t, cell.Addr)
	ctx := coordCtx(t, 60*time.Second)
	r1, _ := NewRegistry(s1, "/svc")
	r2, _ := NewRegistry(s2, "/svc")
	r3, _ := NewRegistry(s3, "/svc")
	if l, err := r3.List(ctx, "web"); err != nil || len(l) != 0 {
		t.Fatalf("List of an unknown service: %v %v", l, err)
	}
	a, err := r1.Register(ctx, "web", "a", []byte("10.0.0.1:80"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Register(ctx, "web", "a", []byte("x")); !client.IsCode(err, chubby.ErrorCode_EXISTS) {
		t.Fatalf("second registration of a: %v", err)
	}
	if _, err := r2.Register(ctx, "web", "b", []byte("10.0.0.2:80")); err != nil {
		t.Fatal(err)
	}
	l, err := r3.List(ctx, "web")
	if err != nil || instancesText(l) != "a=10.0.0.1:80 b=10.0.0.2:80" || l[0].Owner != s1.ID() || l[1].Owner != s2.ID() {
		t.Fatalf("List = %+v, %v", l, err)
	}

	w, err := r3.Watch(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if ch := nextChange(t, w, 20*time.Second); instancesText(ch.Instances) != "a=10.0.0.1:80 b=10.0.0.2:80" || !slices.Equal(ch.Added, []string{"a", "b"}) {
		t.Fatalf("first change %+v", ch)
	}
	if err := a.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	if ch := nextChange(t, w, 20*time.Second); instancesText(ch.Instances) != "b=10.0.0.2:80" || !slices.Equal(ch.Removed, []string{"a"}) {
		t.Fatalf("after Deregister %+v", ch)
	}
	if _, err := r1.Register(ctx, "web", "a", []byte("10.0.0.9:80")); err != nil {
		t.Fatal(err)
	}
	if ch := nextChange(t, w, 20*time.Second); !slices.Equal(ch.Added, []string{"a"}) || instancesText(ch.Instances) != "a=10.0.0.9:80 b=10.0.0.2:80" {
		t.Fatalf("after registering a again %+v", ch)
	}
	s2.Close(ctx) // b's session ends: b leaves
	if ch := nextChange(t, w, 20*time.Second); !slices.Equal(ch.Removed, []string{"b"}) || instancesText(ch.Instances) != "a=10.0.0.9:80" {
		t.Fatalf("after b's session closed %+v", ch)
	}

	// Deleting the service ends the watcher.
	h, err := s1.Open(ctx, "/svc/web", client.OpenOptions{Mode: chubby.OpenMode_READ_WRITE})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Delete(ctx, true); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err = w.Next(coordCtx(t, 20*time.Second)); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrRegistryGone) {
		t.Fatalf("after the delete: %v, want ErrRegistryGone", err)
	}

	for _, args := range [][2]string{{"", "a"}, {"web", ""}, {"a/b", "c"}, {"web", "a b"}} {
		if _, err := r1.Register(ctx, args[0], args[1], nil); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
			t.Errorf("Register(%q, %q): %v", args[0], args[1], err)
		}
	}
	if _, err := r1.Register(ctx, "web", "big", make([]byte, chubby.MAX_CONTENT_BYTES+1)); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
		t.Errorf("Register of a too long address: %v", err)
	}
}

// TestRegistryKilledInstance: kill -9 of a registered instance's process;
// it leaves List and the watcher's set once its session expires.
func TestRegistryKilledInstance(t *testing.T) {
	cell := coordCell(t)
	s := coordSession(t, cell.Addr)
	ctx := coordCtx(t, 60*time.Second)
	r, _ := NewRegistry(s, "/svc")
	if _, err := r.Register(ctx, "db", "local", []byte("127.0.0.1:5432")); err != nil {
		t.Fatal(err)
	}
	w, err := r.Watch(ctx, "db")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	nextChange(t, w, 20*time.Second)
	child := startChild(t, "registry-instance", cell.Addr, "/svc", "db", "child", "10.1.1.1:5432")
	child.Expect("registered", 20*time.Second)
	awaitInstances(t, w, "child=10.1.1.1:5432 local=127.0.0.1:5432", 20*time.Second)
	child.Kill()
	ch := awaitInstances(t, w, "local=127.0.0.1:5432", coordTakeover)
	if !slices.Equal(ch.Removed, []string{"child"}) {
		t.Fatalf("the change that removed the child: %+v", ch)
	}
	if l, err := r.List(ctx, "db"); err != nil || instancesText(l) != "local=127.0.0.1:5432" {
		t.Fatalf("List after the kill: %v %v", instancesText(l), err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Next(ctx); !errors.Is(err, ErrWatcherClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
}
