package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Leader election: whoever holds the exclusive lock on /service/leader
// leads and writes its address into the file. (Compiled, not run: it
// needs a cell.)
func Example() {
	ctx := context.Background()
	c, err := client.Connect(ctx, client.Config{}) // CHUBBY_CELL, else 127.0.0.1:7000
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)

	// A file's parent directory must exist.
	if _, err := s.Mkdir(ctx, "/service", client.MkdirOptions{Parents: true}); err != nil {
		log.Fatal(err)
	}
	h, err := s.Open(ctx, "/service/leader", client.OpenOptions{
		Mode:   chubby.OpenMode_READ_WRITE,
		Create: chubby.CreateMode_OPEN_OR_CREATE,
	})
	if err != nil {
		log.Fatal(err)
	}
	seq, err := h.Acquire(ctx, chubby.LockMode_EXCLUSIVE, time.Minute, client.LockOptions{})
	if client.IsCode(err, chubby.ErrorCode_TIMED_OUT) {
		fmt.Println("someone else leads")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	if _, err := h.SetContents(ctx, []byte("10.0.0.7:8080")); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leading with", client.FormatSequencer(seq))

	select {
	case <-s.Done():
		log.Fatal("session lost: ", s.Err())
	case <-time.After(time.Minute): // lead for a while
	}
	if err := h.Release(ctx); err != nil && !errors.Is(err, client.ErrSessionExpired) {
		log.Fatal(err)
	}
}

// Every call has an asynchronous form returning a future.
func ExampleHandle_GetContentsAndStatAsync() {
	ctx := context.Background()
	c, err := client.Connect(ctx, client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)

	var handles []*client.Handle
	for _, p := range []string{"/config/a", "/config/b"} {
		h, err := s.Open(ctx, p, client.OpenOptions{})
		if err != nil {
			log.Fatal(err)
		}
		handles = append(handles, h)
	}
	// Both reads are in flight at once.
	fa, fb := handles[0].GetContentsAndStatAsync(ctx), handles[1].GetContentsAndStatAsync(ctx)
	fb.Then(func(r *chubby.GetContentsAndStatResponse, err error) {
		if err == nil {
			fmt.Printf("b is %q\n", r.GetContent())
		}
	})
	a, err := fa.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("a is %q\n", a.GetContent())
}
