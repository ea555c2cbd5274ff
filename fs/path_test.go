package fs

import (
	"slices"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
)

func TestParsePath(t *testing.T) {
	long := strings.Repeat("a", 255)
	deep := strings.Repeat("/a", 64)
	tests := []struct {
		path string
		want []string // nil: invalid
	}{
		{"/", []string{}},
		{"/a", []string{"a"}},
		{"/a/b.c/D_e-9", []string{"a", "b.c", "D_e-9"}},
		{"/..a/a..", []string{"..a", "a.."}},
		{"/" + long, []string{long}},
		{deep, slices.Repeat([]string{"a"}, 64)},
		{"", nil},
		{"a", nil},
		{"a/b", nil},
		{"//", nil},
		{"/a/", nil},
		{"/a//b", nil},
		{"/.", nil},
		{"/..", nil},
		{"/a/./b", nil},
		{"/a/../b", nil},
		{"/a b", nil},
		{"/a\x00", nil},
		{"/é", nil},
		{"/a:b", nil},
		{"/" + long + "a", nil},
		{deep + "/a", nil},
		{"/" + strings.Repeat("abcdefgh/", 600) + "x", nil}, // > MAX_PATH_BYTES
	}
	for _, tt := range tests {
		got, err := ParsePath(tt.path)
		if tt.want == nil {
			if err == nil || Code(err) != chubby.ErrorCode_INVALID_ARGUMENT {
				t.Errorf("ParsePath(%.40q) = %v, %v; want INVALID_ARGUMENT", tt.path, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParsePath(%.40q) = %v, %v; want %v", tt.path, got, err, tt.want)
		}
	}
}

func TestCleanPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/", "/"},
		{"a/b", "/a/b"},
		{"/a//b/", "/a/b"},
		{"/a/./b/../c", "/a/c"},
		{"/..", "/"},
	}
	for _, tt := range tests {
		if got, err := CleanPath(tt.in); err != nil || got != tt.want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "/a b", "/" + strings.Repeat("x", 256)} {
		if _, err := CleanPath(bad); Code(err) != chubby.ErrorCode_INVALID_ARGUMENT {
			t.Errorf("CleanPath(%q): err %v, want INVALID_ARGUMENT", bad, err)
		}
	}
}

func TestSequentialName(t *testing.T) {
	for _, tt := range []struct {
		seq  int64
		want string
	}{{0, "x0000000000"}, {42, "x0000000042"}, {maxSequence, "x9999999999"}} {
		if got := sequentialName("x", tt.seq); got != tt.want {
			t.Errorf("sequentialName(x, %d) = %q, want %q", tt.seq, got, tt.want)
		}
	}
}

// FuzzParsePath checks that ParsePath never panics, accepts exactly the
// paths that follow the rules, and that an accepted path round-trips.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/", "/a", "/a/b", "//", "/a/", "/.", "/..", "a", "", "/a b", "/a/../b", "/" + strings.Repeat("z", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		comps, err := ParsePath(p)
		if want := referenceValid(p); want != (err == nil) {
			t.Fatalf("ParsePath(%q): err %v, reference says valid=%v", p, err, want)
		}
		if err != nil {
			if Code(err) != chubby.ErrorCode_INVALID_ARGUMENT {
				t.Fatalf("ParsePath(%q): code %v", p, Code(err))
			}
			return
		}
		if got := "/" + strings.Join(comps, "/"); got != p {
			t.Fatalf("ParsePath(%q) = %q, joined %q", p, comps, got)
		}
		if c, err := CleanPath(p); err != nil || c != p {
			t.Fatalf("CleanPath(%q) = %q, %v: a valid path is already clean", p, c, err)
		}
		if len(comps) > 0 && parentPath(p) != "/"+strings.Join(comps[:len(comps)-1], "/") {
			t.Fatalf("parentPath(%q) = %q", p, parentPath(p))
		}
	})
}

// referenceValid is a deliberately different, obvious implementation of
// the path rules.
func referenceValid(p string) bool {
	if p == "/" {
		return true
	}
	if len(p) > int(chubby.MAX_PATH_BYTES) || !strings.HasPrefix(p, "/") {
		return false
	}
	parts := strings.Split(p[1:], "/")
	if len(parts) > int(chubby.MAX_PATH_DEPTH) {
		return false
	}
	for _, c := range parts {
		if c == "" || c == "." || c == ".." || len(c) > int(chubby.MAX_NAME_BYTES) {
			return false
		}
		if strings.Trim(c, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
			return false
		}
	}
	return true
}
