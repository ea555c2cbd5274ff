package client

import (
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
)

func TestFormatSequencer(t *testing.T) {
	tests := []struct {
		seq  *chubby.Sequencer
		want string
	}{
		{nil, ""},
		{&chubby.Sequencer{Path: "/a/b", Mode: chubby.LockMode_EXCLUSIVE, LockGeneration: 7, Instance: 3},
			"chubby-seq:v1:E:7:3:/a/b"},
		{&chubby.Sequencer{Path: "/", Mode: chubby.LockMode_SHARED, LockGeneration: 0, Instance: 0},
			"chubby-seq:v1:S:0:0:/"},
		{&chubby.Sequencer{Path: "/x", Mode: chubby.LockMode_SHARED, LockGeneration: 9223372036854775807, Instance: 1},
			"chubby-seq:v1:S:9223372036854775807:1:/x"},
	}
	for _, tt := range tests {
		if got := FormatSequencer(tt.seq); got != tt.want {
			t.Errorf("FormatSequencer(%v) = %q, want %q", tt.seq, got, tt.want)
		}
	}
}

func TestParseSequencer(t *testing.T) {
	good := []string{
		"chubby-seq:v1:E:1:1:/a",
		"chubby-seq:v1:S:0:0:/",
		"chubby-seq:v1:E:42:17:/ls/cell/some-dir/file_1.txt",
		"chubby-seq:v1:S:9223372036854775807:9223372036854775807:/a/b/c",
	}
	for _, s := range good {
		seq, err := ParseSequencer(s)
		if err != nil {
			t.Errorf("ParseSequencer(%q): %v", s, err)
			continue
		}
		if got := FormatSequencer(seq); got != s {
			t.Errorf("round trip of %q gave %q", s, got)
		}
	}
	bad := []string{
		"",
		"chubby-seq:v1:",
		"chubby-seq:v2:E:1:1:/a",
		"CHUBBY-SEQ:v1:E:1:1:/a",
		" chubby-seq:v1:E:1:1:/a",
		"chubby-seq:v1:E:1:1:/a ",
		"chubby-seq:v1:E:1:1",
		"chubby-seq:v1:X:1:1:/a",
		"chubby-seq:v1:e:1:1:/a",
		"chubby-seq:v1:EXCLUSIVE:1:1:/a",
		"chubby-seq:v1::1:1:/a",
		"chubby-seq:v1:E::1:/a",
		"chubby-seq:v1:E:1::/a",
		"chubby-seq:v1:E:-1:1:/a",
		"chubby-seq:v1:E:+1:1:/a",
		"chubby-seq:v1:E:01:1:/a",
		"chubby-seq:v1:E:1:00:/a",
		"chubby-seq:v1:E:1:1.0:/a",
		"chubby-seq:v1:E:0x1:1:/a",
		"chubby-seq:v1:E:9223372036854775808:1:/a",
		"chubby-seq:v1:E:1:1:",
		"chubby-seq:v1:E:1:1:a",
		"chubby-seq:v1:E:1:1:/a/",
		"chubby-seq:v1:E:1:1://a",
		"chubby-seq:v1:E:1:1:/a/../b",
		"chubby-seq:v1:E:1:1:/a:b",
		"chubby-seq:v1:E:1:1:/a b",
		"chubby-seq:v1:E:1:1:/é",
		"chubby-seq:v1:E:1:1:/a\n",
	}
	for _, s := range bad {
		if seq, err := ParseSequencer(s); err == nil {
			t.Errorf("ParseSequencer(%q) = %v, want an error", s, seq)
		} else if !IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
			t.Errorf("ParseSequencer(%q): error %v is not INVALID_ARGUMENT", s, err)
		}
	}
}

func TestValidatePath(t *testing.T) {
	long := "/" + strings.Repeat("a", 255)
	deep := strings.Repeat("/a", 64)
	good := []string{"/", "/a", "/a/b", "/A-Z_0.9", "/..a", "/a.", long, deep}
	for _, p := range good {
		if err := ValidatePath(p); err != nil {
			t.Errorf("ValidatePath(%q): %v", p, err)
		}
	}
	bad := []string{"", "a", "a/b", "//", "/a/", "/a//b", "/.", "/..", "/a/./b", "/a/../b",
		"/a b", "/a:b", "/ä", "/a\x00", long + "a", deep + "/a", "/" + strings.Repeat("abcdefgh/", 600) + "a"}
	for _, p := range bad {
		if err := ValidatePath(p); err == nil {
			t.Errorf("ValidatePath(%q) = nil, want an error", truncate(p))
		} else if !IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
			t.Errorf("ValidatePath(%q): %v is not INVALID_ARGUMENT", truncate(p), err)
		}
	}
}

// FuzzParseSequencer checks that the parser is strict: whatever it accepts
// formats back to exactly the input, and it never panics.
func FuzzParseSequencer(f *testing.F) {
	for _, s := range []string{
		"chubby-seq:v1:E:1:1:/a", "chubby-seq:v1:S:0:0:/", "chubby-seq:v1:E:01:1:/a",
		"chubby-seq:v1:E:1:1:/a:b", "chubby-seq:v1:S:9223372036854775807:3:/x/y", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		seq, err := ParseSequencer(s)
		if err != nil {
			if !IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
				t.Fatalf("ParseSequencer(%q): %v is not INVALID_ARGUMENT", s, err)
			}
			return
		}
		if got := FormatSequencer(seq); got != s {
			t.Fatalf("ParseSequencer(%q) then Format = %q", s, got)
		}
		if seq.LockGeneration < 0 || seq.Instance < 0 {
			t.Fatalf("ParseSequencer(%q) gave negative numbers: %v", s, seq)
		}
	})
}

// FuzzSequencerRoundTrip checks that every valid sequencer survives
// Format then Parse unchanged, and every invalid one is rejected.
func FuzzSequencerRoundTrip(f *testing.F) {
	f.Add("/a", true, int64(1), int64(1))
	f.Add("/", false, int64(0), int64(9))
	f.Add("/a/", true, int64(-1), int64(1))
	f.Fuzz(func(t *testing.T, path string, exclusive bool, gen, inst int64) {
		mode := chubby.LockMode_SHARED
		if exclusive {
			mode = chubby.LockMode_EXCLUSIVE
		}
		in := &chubby.Sequencer{Path: path, Mode: mode, LockGeneration: gen, Instance: inst}
		out, err := ParseSequencer(FormatSequencer(in))
		valid := ValidatePath(path) == nil && gen >= 0 && inst >= 0
		if !valid {
			if err == nil {
				t.Fatalf("invalid %v parsed as %v", in, out)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid %v: %v", in, err)
		}
		if *out != *in {
			t.Fatalf("round trip: %v became %v", in, out)
		}
	})
}
