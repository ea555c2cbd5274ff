//go:build !unix

package replica

import (
	"errors"
	"os"
)

// lockDir is not implemented here: Badger locks a directory differently on
// this system, and OpenStorage repairs nothing without Badger's lock.
func lockDir(dir string) (*os.File, bool, error) {
	return nil, false, errors.ErrUnsupported
}

const lockDirSupported = false
