package txn_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/client/txn"
)

// Moving money between two accounts of a table in the cell's directory
// /bank, retrying when another transaction got there first.
func Example() {
	ctx := context.Background()
	c, err := client.Connect(ctx, client.Config{}) // CHUBBY_CELL or localhost
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	db, err := txn.Open(ctx, s, "/bank", txn.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close(ctx)

	transfer := func(from, to string, amount int) error {
		tx, err := db.Begin(ctx)
		if err != nil {
			return err
		}
		bal := func(acct string) int {
			v, _, err2 := tx.Get(ctx, acct, "balance")
			err = errors.Join(err, err2)
			n, _ := strconv.Atoi(string(v))
			return n
		}
		a, b := bal(from), bal(to)
		if err != nil {
			return err
		}
		if a < amount {
			return tx.Rollback(ctx)
		}
		tx.Set(from, "balance", []byte(strconv.Itoa(a-amount)))
		tx.Set(to, "balance", []byte(strconv.Itoa(b+amount)))
		_, err = tx.Commit(ctx)
		return err
	}
	for {
		err := transfer("alice", "bob", 10)
		if !txn.Retryable(err) {
			fmt.Println("transfer:", err)
			return
		}
	}
}
