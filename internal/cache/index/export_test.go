package index

// Hashed is the index key of a value of a field with HashBuckets, without its prefix.
func Hashed(f Field, value string) string { return f.hashed(value) }
