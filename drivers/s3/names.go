package s3

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	minBucketName = 3
	maxBucketName = 63
	hashLen       = 8
)

// BucketName maps a COSI bucket name (the Bucket object's name, e.g. "bc-<uid>") to an S3 bucket
// name: prefix + name, lowercased, with every character outside [a-z0-9-] replaced by "-", no
// leading or trailing "-", 3 to 63 characters. Dots are never used: they break TLS for
// virtual-hosted-style addressing. The result is deterministic. When the name had to change in
// any way, eight hex digits of the name's SHA-256 are appended (after shortening), so two names
// that map to the same text still get different buckets.
func BucketName(prefix, name string) string {
	want := prefix + name
	var b strings.Builder
	for _, r := range strings.ToLower(want) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if s == want && len(s) >= minBucketName && len(s) <= maxBucketName && !reservedBucketName(s) {
		return s
	}
	sum := sha256.Sum256([]byte(want))
	suffix := hex.EncodeToString(sum[:])[:hashLen]
	if len(s) > maxBucketName-hashLen-1 {
		s = strings.TrimRight(s[:maxBucketName-hashLen-1], "-")
	}
	if s == "" || reservedBucketName(s) {
		return "b-" + suffix
	}
	return s + "-" + suffix
}

// reservedBucketName reports names S3 reserves (prefixes "xn--", "sthree-", "amzn-s3-demo-",
// suffixes "-s3alias", "--ol-s3", "--x-s3", "--table-s3").
func reservedBucketName(s string) bool {
	for _, p := range []string{"xn--", "sthree-", "amzn-s3-demo-"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	for _, suf := range []string{"-s3alias", "--ol-s3", "--x-s3", "--table-s3"} {
		if strings.HasSuffix(s, suf) {
			return true
		}
	}
	return false
}

// validAccountName reports whether name can be an IAM user name or RGW user ID as it is:
// 1 to 64 characters of [A-Za-z0-9+=,.@_-].
func validAccountName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("+=,.@_-", r) {
			return false
		}
	}
	return true
}

// validBucketID reports whether id is an S3 bucket name by the naming rules of S3 (and Ceph RGW):
// 3 to 63 characters of [a-z0-9.-], starting and ending with a letter or digit, no "..", and not
// formatted as an IP address. Bucket IDs go into policy ARNs, where "*" and "?" are wildcards,
// "${...}" a policy variable and "/" an object path: an ID like "*" or "prod-*" would grant every
// bucket that matches. Every ID that enters the driver is checked before it is used.
func validBucketID(id string) bool {
	if len(id) < minBucketName || len(id) > maxBucketName || strings.Contains(id, "..") {
		return false
	}
	for i, r := range id {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (r != '-' && r != '.' || i == 0 || i == len(id)-1) {
			return false
		}
	}
	return !ipFormatted(id)
}

// ipFormatted reports whether id is formatted as an IPv4 address, which S3 forbids for bucket
// names: four dot-separated groups of one to three digits. net.ParseIP alone misses the forms it
// refuses to parse, such as "192.168.001.001" and "999.0.0.1", which S3 refuses all the same.
func ipFormatted(id string) bool {
	parts := strings.Split(id, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		if len(p) < 1 || len(p) > 3 || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// checkBucketID returns InvalidArgument unless id is a valid bucket name (see validBucketID).
func checkBucketID(id string) error {
	if !validBucketID(id) {
		return status.Errorf(
			codes.InvalidArgument,
			"bucket ID %q is not an S3 bucket name: 3 to 63 characters of a-z 0-9 . -, "+
				"starting and ending with a letter or digit, no \"..\", not formatted as an IP address",
			id,
		)
	}
	return nil
}
