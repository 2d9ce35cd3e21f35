package azure

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	minContainerName = 3
	maxContainerName = 63
	hashLen          = 8
	// maxPolicyID is the longest signed identifier (stored access policy ID) Azure accepts.
	maxPolicyID = 64
)

// ContainerName maps a COSI bucket name (the Bucket object's name, e.g. "bc-<uid>") to a
// container name: prefix + name, lowercased, with every run of characters outside [a-z0-9]
// replaced by one "-", no leading or trailing "-", 3 to 63 characters (Azure's rules: lowercase
// letters, digits and single hyphens, starting and ending with a letter or digit). The result is
// deterministic. When the name had to change in any way, eight hex digits of the name's SHA-256
// are appended (after shortening), so two names that map to the same text still get different
// containers.
func ContainerName(prefix, name string) string {
	want := prefix + name
	var b strings.Builder
	for _, r := range strings.ToLower(want) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else if s := b.String(); s != "" && !strings.HasSuffix(s, "-") {
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if s == want && validContainerName(s) {
		return s
	}
	sum := sha256.Sum256([]byte(want))
	suffix := hex.EncodeToString(sum[:])[:hashLen]
	if len(s) > maxContainerName-hashLen-1 {
		s = strings.TrimRight(s[:maxContainerName-hashLen-1], "-")
	}
	if s == "" {
		return "b-" + suffix
	}
	return s + "-" + suffix
}

// validContainerName reports whether id is a container name by Azure's rules: 3 to 63 characters
// of [a-z0-9-], starting and ending with a letter or digit, no two hyphens in a row. The
// account's special containers ($root, $web, $logs) are not: the driver never works on them.
func validContainerName(id string) bool {
	if len(id) < minContainerName || len(id) > maxContainerName || strings.Contains(id, "--") {
		return false
	}
	for i, r := range id {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (r != '-' || i == 0 || i == len(id)-1) {
			return false
		}
	}
	return true
}

// checkContainerName returns InvalidArgument unless id is a container name (validContainerName).
// Every bucket ID is checked before it reaches a URL.
func checkContainerName(id string) error {
	if !validContainerName(id) {
		return status.Errorf(
			codes.InvalidArgument,
			"bucket ID %q is not an Azure container name: 3 to 63 characters of a-z 0-9 -, "+
				"starting and ending with a letter or digit, no \"--\"",
			id,
		)
	}
	return nil
}

// validPolicyID reports whether id can be a stored access policy's ID (signed identifier) as it
// is: 1 to 64 characters of [A-Za-z0-9._-] (Azure allows up to 64 characters; the driver keeps
// to those that need no escaping in the SAS query or the ACL's XML).
func validPolicyID(id string) bool {
	if id == "" || len(id) > maxPolicyID {
		return false
	}
	for _, r := range id {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("._-", r) {
			return false
		}
	}
	return true
}
