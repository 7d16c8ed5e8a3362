package fence

// Store is what the barrier needs from durable storage: per-resource
// maxima that only go up. The stores under store/ (Badger, etcd, memory)
// provide it, each checked by the same conformance suite (store/storetest).
type Store interface {
	// Max returns resource's durable maximum, 0 for a resource never raised.
	// The barrier calls it under the resource's lock (once per admitted
	// write), so it should answer from memory for resources in use.
	Max(resource string) (uint64, error)
	// Raise makes max(stored, t) resource's durable maximum (synced before it
	// returns) and returns it; concurrent raises never leave the smaller one
	// behind. t is at most MaxToken.
	Raise(resource string, t uint64) (uint64, error)
}

// StartView is implemented by stores that remember which resources had a
// record when the process started, so that after an unclean stop only those
// wait out the start-up grace (see Options.StartGrace). A write is forwarded
// only once its resource has a durable record (a raise, or MarkWritten for
// token 0, which raises nothing), so a resource without one at start had no
// write in flight from an earlier process. With a store without it, every
// token above 0 waits out the start-up grace.
type StartView interface {
	// MaxAtOpen returns resource's maximum as it was when the store was
	// opened, and whether it had a record then.
	MaxAtOpen(resource string) (max uint64, found bool, err error)
	// MarkWritten gives resource a durable record (maximum 0) if it has none.
	MarkWritten(resource string) error
}

// PrefixLister is implemented by stores that list the prefix fences (names
// ending in "/") with a maximum above 0, for the barrier to load them at New.
type PrefixLister interface {
	// Prefixes returns up to limit such records whose resource sorts
	// strictly after after ("" = from the start), in resource (byte) order;
	// a full page means there may be more.
	Prefixes(after string, limit int) ([]Record, error)
}

// Record is one resource's stored maximum, as listings return it.
type Record struct {
	Resource string
	Token    uint64
}
