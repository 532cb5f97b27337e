package reentrant

import (
	"fmt"

	"github.com/redfence/redfence/internal/scripts"
)

// MaxNameLen is the longest lock name accepted, in bytes. Any non-empty
// string up to it is a name, braces included; every call that takes a name
// returns ErrInvalid for another.
const MaxNameLen = scripts.MaxNameLen

func checkName(name string) error { return invalidErr(scripts.CheckName(name)) }

func checkPrefix(p string) error { return invalidErr(scripts.CheckPrefix(p)) }

// invalidErr wraps err, if any, in ErrInvalid.
func invalidErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalid, err)
}
