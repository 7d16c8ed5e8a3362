package lease

// Entry is a stored lease with its state at the time of a List.
type Entry struct {
	Lease
	State State
}

// List returns up to limit (>= 1) stored leases, in name order, whose name
// starts with prefix and sorts after after, each with its state now. The
// store starts reading at after (LeasesFrom), so a page costs its own
// records, not those before it. Errors are store errors and corrupt
// records.
func (m *Manager) List(prefix, after string, limit int) ([]Entry, error) {
	now := m.opts.Now()
	var out []Entry
	err := m.store.LeasesFrom(prefix, after, limit, func(name string, rec []byte) error {
		l, err := decode(name, rec)
		if err != nil {
			return err
		}
		out = append(out, Entry{Lease: *l, State: m.StateAt(*l, now)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
