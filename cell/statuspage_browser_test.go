package cell

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/replica/vr"
)

// TestStatusPageInABrowser opens the master's /status in headless Chromium
// (Debian's chromium; .ci/run installs it, and the test skips where it is
// missing) on a three-replica cell that assembled itself by gossip, and
// checks what the rendered page shows: every member with its membership,
// the master, and the membership decisions. It keeps a screenshot: in
// $CHUBBY_TEST_ARTIFACTS when set, else in the test's temporary directory
// (the log names the file either way).
func TestStatusPageInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cell and a browser")
	}
	browser := ""
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(b); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Skip("no headless Chromium here (Debian: apt-get install chromium); .ci/run installs it")
	}
	r1 := startGossipReplica(t, 1, nil, t.TempDir())
	seed := []string{r1.gossipAddr()}
	r2 := startGossipReplica(t, 0, seed, t.TempDir())
	r3 := startGossipReplica(t, 0, seed, t.TempDir())
	rs := []*gossipReplica{r1, r2, r3}
	m := awaitConfig(t, rs, "three voters", func(ms vr.Members) bool { return len(ms.Voters()) == 3 })
	url := "http://" + m.HTTPAddr() + "/status"

	dir := os.Getenv("CHUBBY_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot, err := filepath.Abs(filepath.Join(dir, "status-page.png"))
	if err != nil {
		t.Fatal(err)
	}
	profile := t.TempDir() // a profile of its own: nothing of the machine's is read or kept
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
			"--user-data-dir=" + profile, "--window-size=1280,1600"}, args...)
		out, err := exec.CommandContext(ctx, browser, append(args, url)...).Output()
		if err != nil {
			t.Fatalf("%s %s: %v", browser, strings.Join(args, " "), err)
		}
		return string(out)
	}
	dom := run("--dump-dom")
	for _, w := range []string{"the master", "Recent membership decisions", "bootstrap: a new cell of this replica alone", m.Addr()} {
		if !strings.Contains(dom, w) {
			t.Errorf("the page as the browser rendered it lacks %q", w)
		}
	}
	rows := memberRows(dom)
	for _, r := range rs {
		if id := "voter:" + strconv.FormatUint(r.s.ID(), 10); !slices.Contains(rows, id) {
			t.Errorf("the members table %v lacks %s", rows, id)
		}
	}
	if t.Failed() {
		t.Logf("the rendered page:\n%s", dom)
	}
	run("--screenshot=" + shot)
	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	t.Logf("screenshot of %s: %s", url, shot)
}
