package lease

import (
	"errors"
	"strings"
)

// Entry is a stored lease with its state at the time of a List.
type Entry struct {
	Lease
	State State
}

// errPageFull ends the walk of List once its page is full.
var errPageFull = errors.New("page full")

// List returns up to limit (>= 1) stored leases, in name order, whose name
// starts with prefix and sorts after after, each with its state now. It
// walks the records from the first (the store keeps few: one per lease
// name ever acquired), so a page costs the records before it. Errors are
// store errors and corrupt records.
func (m *Manager) List(prefix, after string, limit int) ([]Entry, error) {
	now := m.opts.Now()
	var out []Entry
	err := m.store.EachLease(func(name string, rec []byte) error {
		switch {
		case !strings.HasPrefix(name, prefix) && name > prefix:
			return errPageFull // names with the prefix sort together: none follows
		case name <= after || !strings.HasPrefix(name, prefix):
			return nil
		}
		l, err := decode(name, rec)
		if err != nil {
			return err
		}
		out = append(out, Entry{Lease: *l, State: m.StateAt(*l, now)})
		if len(out) == limit {
			return errPageFull
		}
		return nil
	})
	if err != nil && !errors.Is(err, errPageFull) {
		return nil, err
	}
	return out, nil
}
