// Package layers holds one test: the module's packages import only
// downward, as the README's Layout section says.
package layers

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/chubbygo/chubby/"

// rank orders the top-level directories: a package may import packages of
// its own directory and of lower ranks only (tests aside).
var rank = map[string]int{
	"gen": 0, "rpc": 1, "fs": 1, "replica": 2, "cell": 3, "client": 3, "tools": 4,
}

// across are the imports between directories of one rank that are meant:
// the simulator runs the client's KeepAlive loop (and through it the lease
// rules), master guess and request numbers, the code that ships.
var across = map[string]bool{
	"cell/sim -> client/keepalive": true,
	"cell/sim -> client/locate":    true,
	"cell/sim -> client/rid":       true,
}

// TestImportsPointDown lists every package's imports (not its tests') with
// go list and refuses one that points up, or across without being listed
// in across.
func TestImportsPointDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{range .Imports}}{{$.ImportPath}} {{.}}{{"\n"}}{{end}}`, module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		from, to, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(to, module) {
			continue
		}
		from, to = strings.TrimPrefix(from, module), strings.TrimPrefix(to, module)
		fd, _, _ := strings.Cut(from, "/")
		td, _, _ := strings.Cut(to, "/")
		fr, ok1 := rank[fd]
		tr, ok2 := rank[td]
		if !ok1 || !ok2 {
			t.Errorf("%s -> %s: a top-level directory the layout does not name", from, to)
			continue
		}
		seen++
		switch {
		case fd == td || tr < fr:
		case tr == fr && across[from+" -> "+to]:
		default:
			t.Errorf("%s imports %s: %s is not below %s", from, to, td, fd)
		}
	}
	if seen < 50 {
		t.Fatalf("only %d imports within the module: go list did not list it", seen)
	}
}
