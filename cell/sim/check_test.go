package sim

import (
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/chubbygo/chubby/gen/chubby"
)

// TestModelRefusalsAreDefinite checks the porcupine model on small
// histories of one file: a refusal the client was given is a no-op at one
// instant of its call, so a history where the refused operation's effect
// shows later is not linearizable; an unknown outcome may or may not have
// taken effect.
func TestModelRefusalsAreDefinite(t *testing.T) {
	const f = "/f0"
	op := func(call, ret int64, in modelInput, out modelOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: int(call), Input: in, Call: call, Output: out, Return: ret}
	}
	write := op(2, 3, modelInput{kind: opWrite, key: f, value: "y"}, modelOutput{ok: true, gen: 2})
	// A CAS that could succeed only after the write, and a read after it
	// that sees the CAS's value.
	cas := modelInput{kind: opCAS, key: f, value: "x", expected: 2}
	read := op(11, 12, modelInput{kind: opRead, key: f}, modelOutput{ok: true, value: "x", gen: 3})
	mismatch := modelOutput{code: chubby.ErrorCode_GENERATION_MISMATCH}
	for _, tc := range []struct {
		name string
		hist []porcupine.Operation
		want bool
	}{
		{"CAS refused before the write", []porcupine.Operation{
			op(1, 10, cas, mismatch), write}, true},
		{"CAS refused, then its value read", []porcupine.Operation{
			op(1, 10, cas, mismatch), write, read}, false},
		{"CAS of unknown outcome, then its value read", []porcupine.Operation{
			op(1, farFuture, cas, modelOutput{unknown: true}), write, read}, true},
		{"CAS succeeded, then its value read", []porcupine.Operation{
			op(1, 10, cas, modelOutput{ok: true, gen: 3}), write, read}, true},
		{"CAS refused after the write made its generation current", []porcupine.Operation{
			write, op(4, 10, cas, mismatch)}, false},
		{"write refused, then its value read", []porcupine.Operation{
			op(1, 10, modelInput{kind: opWrite, key: f, value: "x"}, modelOutput{code: chubby.ErrorCode_HANDLE_INVALID}),
			op(11, 12, modelInput{kind: opRead, key: f}, modelOutput{ok: true, value: "x", gen: 2})}, false},
		{"create refused EXISTS with nothing to have created it", []porcupine.Operation{
			op(1, 2, modelInput{kind: opCreate, key: "/c0"}, modelOutput{code: chubby.ErrorCode_EXISTS})}, false},
	} {
		if got := porcupine.CheckOperations(model(), tc.hist); got != tc.want {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, got, tc.want)
		}
	}
}
