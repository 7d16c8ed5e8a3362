package fence

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

var (
	// ErrTokenMissing: a fenced write carries no token (428).
	ErrTokenMissing = errors.New("fencing token missing")
	// ErrTokenMalformed: the token is empty, not a canonical unsigned
	// decimal, above 2^63-1, or given more than once (400).
	ErrTokenMalformed = errors.New("fencing token malformed")
)

// MaxToken is the largest fencing token, 2^63-1, so tokens from Java, etcd and
// Redisson fit.
const MaxToken = math.MaxInt64

// ParseToken parses one token value: an unsigned decimal integer, digits only,
// no sign, no leading zeros ("0" itself is fine), at most 2^63-1.
// Errors wrap ErrTokenMalformed and say what is wrong.
func ParseToken(s string) (uint64, error) {
	switch {
	case s == "":
		return 0, fmt.Errorf("%w: empty value", ErrTokenMalformed)
	case len(s) > 19: // 2^63-1 has 19 digits; also bounds the work on hostile input
		return 0, fmt.Errorf("%w: more than 19 digits", ErrTokenMalformed)
	case len(s) > 1 && s[0] == '0':
		return 0, fmt.Errorf("%w: leading zero", ErrTokenMalformed)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: not an unsigned decimal integer (only digits 0-9 are allowed)", ErrTokenMalformed)
		}
	}
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil || t > MaxToken {
		return 0, fmt.Errorf("%w: above 2^63-1", ErrTokenMalformed)
	}
	return t, nil
}

// TokenFromValues reads the token from the values a request carries under
// its token field (a header named name): ErrTokenMissing for none;
// ErrTokenMalformed for more than one or a malformed one.
func TokenFromValues(values []string, name string) (uint64, error) {
	switch len(values) {
	case 0:
		return 0, ErrTokenMissing
	case 1:
		return ParseToken(values[0])
	default:
		return 0, fmt.Errorf("%w: %s given %d times", ErrTokenMalformed, name, len(values))
	}
}
