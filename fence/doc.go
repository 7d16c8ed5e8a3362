// Package fence is fenceproxy's fencing core, free of any transport: the
// token grammar, the resolver from a request target to its resource keys,
// the admission rule, and the fence barrier that owns every raise of a
// resource's maximum, whatever made it (a write, a lease acquire, an
// operator, a later replica or pool). See the project brief's "fence
// barrier" and Kleppmann 2016, "How to do distributed locking".
package fence
