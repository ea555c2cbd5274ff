package fs

import (
	"path"
	"strings"

	"github.com/chubbygo/chubby/gen/chubby"
)

// Path rules. A path is absolute: "/" (the root) or "/" followed by
// components separated by single slashes, with no trailing slash. A
// component is 1..chubby.MAX_NAME_BYTES bytes of [A-Za-z0-9._-] and is not
// "." or "..". A path has at most chubby.MAX_PATH_DEPTH components and at
// most chubby.MAX_PATH_BYTES bytes.

// sequenceDigits is the width of the counter appended to sequential names.
const sequenceDigits = 10

// maxSequence is the largest counter that fits in sequenceDigits digits.
const maxSequence = 9_999_999_999

// ParsePath checks p against the path rules and returns its components
// (none for the root). A violation is an INVALID_ARGUMENT *chubby.ChubbyError.
func ParsePath(p string) ([]string, error) {
	comps, err := parsePath(p)
	return comps, asError(err)
}

func parsePath(p string) ([]string, *chubby.ChubbyError) {
	if p == "" {
		return nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "path is empty")
	}
	if len(p) > int(chubby.MAX_PATH_BYTES) {
		return nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "path is %d bytes, more than %d", len(p), chubby.MAX_PATH_BYTES)
	}
	if p[0] != '/' {
		return nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "path %q is not absolute", p)
	}
	if p == "/" {
		return []string{}, nil
	}
	n := strings.Count(p, "/")
	if n > int(chubby.MAX_PATH_DEPTH) {
		return nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "path %q has %d components, more than %d", p, n, chubby.MAX_PATH_DEPTH)
	}
	comps := make([]string, 0, n)
	rest := p[1:]
	for {
		i := strings.IndexByte(rest, '/')
		c := rest
		if i >= 0 {
			c = rest[:i]
		}
		if err := checkName(c); err != nil {
			return nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "path %q: %s", p, err.Message)
		}
		comps = append(comps, c)
		if i < 0 {
			break
		}
		rest = rest[i+1:]
	}
	return comps, nil
}

// CheckName checks one path component: 1..MAX_NAME_BYTES bytes of
// [A-Za-z0-9._-], not "." or "..". The error is INVALID_ARGUMENT.
func CheckName(c string) error {
	if err := checkName(c); err != nil {
		return err
	}
	return nil
}

// checkName checks one path component.
func checkName(c string) *chubby.ChubbyError {
	if c == "" {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "empty component (double or trailing slash)")
	}
	if len(c) > int(chubby.MAX_NAME_BYTES) {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "component is %d bytes, more than %d", len(c), chubby.MAX_NAME_BYTES)
	}
	if c == "." || c == ".." {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "component %q is not allowed", c)
	}
	for i := 0; i < len(c); i++ {
		if !nameByte(c[i]) {
			return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "byte %q at %d of component %q is not one of [A-Za-z0-9._-]", c[i], i, c)
		}
	}
	return nil
}

func nameByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '.' || b == '_' || b == '-'
}

// CleanPath is the lenient front door for people typing paths (the CLI): it
// makes p absolute, collapses repeated slashes, drops a trailing slash and
// resolves "." and ".." lexically, then checks the result with ParsePath.
// The state machine itself never cleans: commands must carry clean paths.
func CleanPath(p string) (string, error) {
	if p == "" {
		return "", Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "path is empty")
	}
	c := path.Clean("/" + p)
	if _, err := ParsePath(c); err != nil {
		return "", err
	}
	return c, nil
}

// joinPath returns the path of the child name of the directory at dir.
func joinPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// parentPath returns the path of the parent of the (clean, non-root) path p.
func parentPath(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}
