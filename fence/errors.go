package fence

import (
	"errors"
	"fmt"
)

var (
	// ErrStale: the token is below the resource's maximum (409). Refusals
	// come as *StaleError.
	ErrStale = errors.New("stale fencing token")
	// ErrDrainTimeout: writes with smaller tokens were still in flight when
	// the drain timeout passed (503 with Retry-After).
	ErrDrainTimeout = errors.New("timed out waiting for in-flight writes with smaller tokens")
	// ErrJump: the token is more than Options.MaxTokenJump above the
	// resource's maximum (403), so a wild token cannot fence a resource off
	// for good.
	ErrJump = errors.New("fencing token jumps too far above the maximum")
	// ErrStore: the maximum could not be read or made durable (503, fail closed).
	ErrStore = errors.New("token store unavailable")
)

// StaleError is a refusal of token Token on Resource, whose maximum is
// Current. It matches ErrStale with errors.Is.
type StaleError struct {
	Resource       string
	Token, Current uint64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("stale fencing token %d for resource %q: current maximum is %d", e.Token, e.Resource, e.Current)
}

// Is makes errors.Is(err, ErrStale) hold.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// ResourceError is a refusal concerning one resource of a write, the one a
// refusal names (a COPY or MOVE touches two): Err is the reason (it wraps one
// of the sentinels above, or the caller's own).
type ResourceError struct {
	Resource string
	Err      error
}

func (e *ResourceError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *ResourceError) Unwrap() error { return e.Err }

// ResourceOf returns the resource that err concerns: that of the first
// *StaleError or *ResourceError in its chain, "" if none.
func ResourceOf(err error) string {
	var stale *StaleError
	var re *ResourceError
	switch {
	case errors.As(err, &stale):
		return stale.Resource
	case errors.As(err, &re):
		return re.Resource
	}
	return ""
}

// onResource wraps err (nil stays nil) as a *ResourceError of resource.
func onResource(resource string, err error) error {
	if err == nil {
		return nil
	}
	return &ResourceError{Resource: resource, Err: err}
}
