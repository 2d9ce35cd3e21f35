package s3

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

var allModes = []cosiproto.AccessMode_Mode{
	cosiproto.AccessMode_UNSPECIFIED,
	cosiproto.AccessMode_READ_ONLY,
	cosiproto.AccessMode_WRITE_ONLY,
	cosiproto.AccessMode_READ_WRITE,
}

// modeCombinations are the 63 ways to ask for at least one mode.
func modeCombinations() [][3]cosiproto.AccessMode_Mode {
	var out [][3]cosiproto.AccessMode_Mode
	for _, d := range allModes {
		for _, om := range allModes {
			for _, bm := range allModes {
				if d != cosiproto.AccessMode_UNSPECIFIED || om != cosiproto.AccessMode_UNSPECIFIED ||
					bm != cosiproto.AccessMode_UNSPECIFIED {
					out = append(out, [3]cosiproto.AccessMode_Mode{d, om, bm})
				}
			}
		}
	}
	return out
}

func longBucketName(i int) string {
	name := fmt.Sprintf("bucket-%02d-", i)
	return name + strings.Repeat("x", maxBucketName-len(name))
}

// quotedLen is the length of the JSON list ["a","b",...] without its brackets.
func quotedLen(items []string) int {
	n := len(items) - 1 // commas
	for _, s := range items {
		n += len(s) + 2
	}
	return n
}

// TestUserPolicySize checks the size arithmetic of the IAM policy for 1 to 20 buckets with
// 63-character names and every combination of modes: the size the driver computes is the
// document's length as IAM counts it, it grows by exactly the bucket's ARNs per bucket (one
// statement per action list, not per bucket), the limit check refuses exactly the documents over
// 2,048 characters with OutOfRange, and every bucket gets exactly its modes' actions.
func TestUserPolicySize(t *testing.T) {
	a := &IAMAccounts{}
	fits := map[[3]cosiproto.AccessMode_Mode]int{}
	for _, modes := range modeCombinations() {
		g := bucketGrant{Modes: modes}
		bucketActs, objectActs := g.bucketActions()
		// The document, counted by hand: the frame, then per statement its frame, actions and
		// resources.
		frame := len(`{"Version":"2012-10-17","Statement":[]}`)
		stmt := func(acts []string, resources []string) int {
			if len(acts) == 0 {
				return 0
			}
			return len(`{"Effect":"Allow","Action":[],"Resource":[]}`) + quotedLen(acts) + quotedLen(resources)
		}
		for n := 1; n <= 20; n++ {
			var grants []bucketGrant
			var bucketARNs, objectARNs []string
			for i := range n {
				grants = append(grants, bucketGrant{Bucket: longBucketName(i), Modes: modes})
				bucketARNs = append(bucketARNs, "arn:aws:s3:::"+longBucketName(i))
				objectARNs = append(objectARNs, "arn:aws:s3:::"+longBucketName(i)+"/*")
			}
			want := frame + stmt(bucketActs, bucketARNs) + stmt(objectActs, objectARNs)
			if len(bucketActs) > 0 && len(objectActs) > 0 {
				want++ // the comma between the two statements
			}
			doc, err := json.Marshal(userPolicy(grants))
			if err != nil {
				t.Fatal(err)
			}
			if got := policySize(doc); got != want || got != len(doc) {
				t.Fatalf(
					"modes %v, %d buckets: policySize %d, document %d characters, counted by hand %d",
					modes,
					n,
					got,
					len(doc),
					want,
				)
			}
			err = a.checkSize(doc, n)
			switch {
			case want <= MaxInlinePolicySize && err != nil:
				t.Errorf("modes %v, %d buckets (%d characters): %v, want it to fit", modes, n, want, err)
			case want > MaxInlinePolicySize && (status.Code(err) != codes.OutOfRange || !strings.Contains(err.Error(), "2048")):
				t.Errorf("modes %v, %d buckets (%d characters): %v, want OutOfRange naming the limit", modes, n, want, err)
			case want <= MaxInlinePolicySize:
				fits[modes] = n
			}
			checkGrants(t, doc, grants)
		}
	}
	rw := cosiproto.AccessMode_READ_WRITE
	ro := cosiproto.AccessMode_READ_ONLY
	for _, modes := range [][3]cosiproto.AccessMode_Mode{{rw, 0, 0}, {ro, 0, 0}, {rw, rw, 0}, {rw, rw, rw}} {
		// The figures in docs/drivers/s3.md, also for names like bc-<UID> (39 characters).
		var grants []bucketGrant
		one, n39 := 0, 0
		for i := 0; ; i++ {
			grants = append(grants, bucketGrant{Bucket: fmt.Sprintf("bc-%036d", i), Modes: modes})
			doc, _ := json.Marshal(userPolicy(grants))
			if i == 0 {
				one = len(doc)
			}
			if len(doc) > MaxInlinePolicySize {
				break
			}
			n39 = i + 1
		}
		t.Logf("modes %v: one 39-character bucket %d characters; "+
			"%d buckets with 39-character names fit in 2,048 characters, %d with 63-character names",
			modes, one, n39, fits[modes])
	}
	if fits[[3]cosiproto.AccessMode_Mode{rw, rw, rw}] < 5 {
		t.Errorf("full access fits only %d buckets with 63-character names", fits[[3]cosiproto.AccessMode_Mode{rw, rw, rw}])
	}
}

// TestUserPolicyMixedModes checks a policy whose buckets each have other modes: every bucket
// gets exactly its own actions, and sharing statements never makes it larger than one statement
// pair per bucket.
func TestUserPolicyMixedModes(t *testing.T) {
	combos := modeCombinations()
	for n := 1; n <= 20; n++ {
		for start := range combos {
			var grants []bucketGrant
			perBucket := 0
			for i := range n {
				g := bucketGrant{Bucket: longBucketName(i), Modes: combos[(start+i*7)%len(combos)]}
				grants = append(grants, g)
				one, _ := json.Marshal(userPolicy([]bucketGrant{g}))
				perBucket += len(one)
			}
			doc, err := json.Marshal(userPolicy(grants))
			if err != nil {
				t.Fatal(err)
			}
			if len(doc) > perBucket {
				t.Errorf("%d buckets: %d characters, more than a policy per bucket (%d)", n, len(doc), perBucket)
			}
			checkGrants(t, doc, grants)
		}
	}
}

// checkGrants decodes doc and checks that it allows each grant's bucket and object actions on
// its bucket and nothing else.
func checkGrants(t *testing.T, doc []byte, grants []bucketGrant) {
	t.Helper()
	var p Policy
	if err := json.Unmarshal(doc, &p); err != nil {
		t.Fatal(err)
	}
	allowed := map[string][]string{} // resource -> actions
	for _, s := range p.Statement {
		if s.Effect != "Allow" || s.Sid != "" || s.Principal != nil {
			t.Fatalf("statement %+v", s)
		}
		for _, r := range s.Resource {
			allowed[r] = append(allowed[r], s.Action...)
		}
	}
	for _, g := range grants {
		bucketActs, objectActs := g.bucketActions()
		for resource, want := range map[string][]string{
			"arn:aws:s3:::" + g.Bucket:        bucketActs,
			"arn:aws:s3:::" + g.Bucket + "/*": objectActs,
		} {
			got := slices.Clone(allowed[resource])
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("%s: actions %v, want %v", resource, got, want)
			}
			delete(allowed, resource)
		}
	}
	if len(allowed) > 0 {
		t.Fatalf("resources no grant asked for: %v", allowed)
	}
}

// TestMetadataModesActions checks the table itself: no metadata mode holds an action that reads,
// exposes, destroys or locks object data, and no mode holds one of the never-granted actions.
func TestMetadataModesActions(t *testing.T) {
	never := []string{
		"s3:PutBucketPolicy",
		"s3:DeleteBucketPolicy",
		"s3:GetBucketPolicy",
		"s3:PutBucketAcl",
		"s3:GetBucketAcl",
		"s3:PutObjectAcl",
		"s3:PutObjectVersionAcl",
		"s3:GetObjectAcl",
		"s3:GetObjectVersionAcl",
		"s3:PutBucketPublicAccessBlock",
		"s3:DeleteBucketPublicAccessBlock",
		"s3:PutBucketOwnershipControls",
		"s3:DeleteBucket",
		"s3:CreateBucket",
		"s3:ListAllMyBuckets",
		"s3:BypassGovernanceRetention",
		"s3:PutLifecycleConfiguration",
		"s3:PutBucketObjectLockConfiguration",
		"s3:PutEncryptionConfiguration",
	}
	data := []string{
		"s3:GetObject",
		"s3:GetObjectVersion",
		"s3:ListBucket",
		"s3:ListBucketVersions",
		"s3:PutObject",
		"s3:DeleteObject",
		"s3:DeleteObjectVersion",
		"s3:PutObjectRetention",
		"s3:PutObjectLegalHold",
		"s3:RestoreObject",
		"s3:GetObjectAttributes",
	}
	for c, set := range actions {
		all := slices.Concat(set.readBucket, set.readObject, set.writeBucket, set.writeObject)
		for _, a := range all {
			if slices.Contains(never, a) {
				t.Errorf("category %d grants %s, which no mode may", c, a)
			}
			if c != objectData && slices.Contains(data, a) {
				t.Errorf("metadata category %d grants %s, which reaches object data", c, a)
			}
		}
	}
}

func TestValidBucketID(t *testing.T) {
	for id, want := range map[string]bool{
		"bc-3f1e9a52": true, "abc": true, "a.b.c": true, "my-bucket.example": true,
		strings.Repeat("a", 63): true, "xn--legacy": true, "1.2.3": true, "1.2.3.4.5": true,
		"": false, "ab": false, strings.Repeat("a", 64): false, "*": false, "prod-*": false,
		"b?cket": false, "${aws:username}": false, "bucket/*": false, "Bucket": false,
		"under_score": false, "-lead": false, "trail-": false, ".dot": false, "dot.": false,
		"a..b": false, "192.168.1.1": false, "192.168.001.001": false, "010.0.0.1": false,
		"999.999.999.999": false, "bucket name": false, "bücket": false,
	} {
		if got := validBucketID(id); got != want {
			t.Errorf("validBucketID(%q) = %v, want %v", id, got, want)
		}
	}
}

// TestRawPolicyRoundTrip checks that statements the driver does not own, and fields it does not
// know, survive a parse and a write unchanged in meaning, also for a policy whose Statement is a
// single object (which the policy grammar allows).
func TestRawPolicyRoundTrip(t *testing.T) {
	foreign := `{"Sid":"Office","Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*",` +
		`"Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}},"FutureField":{"x":[1,2]}}`
	ours := `{"Sid":"` + rgwSid("ba-1") + `Bucket","Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/ba-1"]},` +
		`"Action":["s3:ListBucket"],"Resource":["arn:aws:s3:::b"]}`
	for name, doc := range map[string]string{
		"list":             `{"Version":"2012-10-17","Id":"p1","Statement":[` + foreign + `,` + ours + `]}`,
		"single statement": `{"Id":"p1","Version":"2012-10-17","Statement":` + foreign + `}`,
	} {
		p, err := parseRawPolicy(doc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p.statements = slices.DeleteFunc(p.statements, func(s json.RawMessage) bool { return owned(s, rgwSid("ba-1")) })
		out, err := p.marshal()
		if err != nil {
			t.Fatal(err)
		}
		var got, want any
		_ = json.Unmarshal(out, &got)
		_ = json.Unmarshal([]byte(`{"Version":"2012-10-17","Id":"p1","Statement":[`+foreign+`]}`), &want)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: written back as\n%s\nwant the meaning of\n%v", name, out, want)
		}
	}
}
