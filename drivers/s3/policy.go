package s3

import (
	"slices"
	"strings"
	"unicode"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// category is one of KEP-1979's three kinds of bucket data that access modes are granted for.
type category int

const (
	objectData category = iota
	objectMetadata
	bucketMetadata
)

// actionSet holds the S3 actions that read and that write one category. Bucket actions apply to
// the bucket's ARN, object actions to its objects' ARN (bucket/*).
type actionSet struct {
	readBucket, readObject   []string
	writeBucket, writeObject []string
}

// actions maps each category to S3 actions; docs/drivers/s3.md shows the same table with the
// reason for each action. It is deliberately explicit (no wildcards) so that a new S3 action is
// never granted by accident.
//
// The metadata categories never reach object data: nothing in them reads it (GetObject,
// HeadObject, listing), exposes it (object and bucket ACLs, bucket policies), destroys it
// (lifecycle rules, default encryption with a key the owner may not hold) or locks it (Object
// Lock configuration, retention, legal holds).
//
// Not in objectData write either: object retention and legal holds (objectLockActions). A
// COMPLIANCE retention keeps an object, and with it the bucket, from being deleted by anyone
// until its date, years ahead if the writer likes: more than deleting what one may write. They
// are granted only to accesses whose BucketAccessClass opts in (ParamAllowObjectLock).
//
// Never granted, whatever the mode: actions that change or reveal who may access the bucket
// (bucket policy, bucket and object ACLs, public access block, ownership controls), that delete
// the bucket or create others, that expire, re-encrypt or lock data for everyone (lifecycle,
// default encryption, Object Lock configuration), and s3:BypassGovernanceRetention. A workload
// must not be able to widen its own access or destroy what the BucketClaim owns.
var actions = map[category]actionSet{
	objectData: {
		readBucket: []string{"s3:ListBucket", "s3:ListBucketVersions", "s3:ListBucketMultipartUploads"},
		readObject: []string{
			"s3:GetObject",
			"s3:GetObjectVersion",
			"s3:GetObjectAttributes",
			"s3:GetObjectVersionAttributes",
			"s3:ListMultipartUploadParts",
		},
		writeObject: []string{
			"s3:PutObject",
			"s3:DeleteObject",
			"s3:DeleteObjectVersion",
			"s3:AbortMultipartUpload",
			"s3:RestoreObject",
		},
	},
	objectMetadata: {
		readObject: []string{
			"s3:GetObjectTagging",
			"s3:GetObjectVersionTagging",
			"s3:GetObjectRetention",
			"s3:GetObjectLegalHold",
		},
		writeObject: []string{
			"s3:PutObjectTagging",
			"s3:PutObjectVersionTagging",
			"s3:DeleteObjectTagging",
			"s3:DeleteObjectVersionTagging",
		},
	},
	bucketMetadata: {
		readBucket: []string{"s3:GetBucketLocation", "s3:GetBucketTagging", "s3:GetBucketVersioning", "s3:GetBucketCORS",
			"s3:GetLifecycleConfiguration", "s3:GetBucketObjectLockConfiguration", "s3:GetEncryptionConfiguration"},
		writeBucket: []string{"s3:PutBucketTagging", "s3:PutBucketVersioning", "s3:PutBucketCORS"},
	},
}

// objectLockActions set object retention and legal holds, on objects. They are granted with
// objectData write only to accesses that opt in (ParamAllowObjectLock); they work only in buckets
// with Object Lock (bucket parameter objectLock). s3:BypassGovernanceRetention is never granted.
var objectLockActions = []string{"s3:PutObjectLegalHold", "s3:PutObjectRetention"}

// bucketGrant is what one access may do in one bucket.
type bucketGrant struct {
	Bucket string
	Modes  [3]cosiproto.AccessMode_Mode // indexed by category
	// LockObjects adds objectLockActions to objectData write (ParamAllowObjectLock).
	LockObjects bool
}

func grantFor(b *cosiproto.AccessedBucket, p accessParams) bucketGrant {
	m := b.GetAccessModes()
	return bucketGrant{
		Bucket:      b.GetBucketId(),
		Modes:       [3]cosiproto.AccessMode_Mode{m.GetObjectData(), m.GetObjectMetadata(), m.GetBucketMetadata()},
		LockObjects: p.allowObjectLock,
	}
}

// writesObjects reports whether g may write object data (s3:PutObject).
func (g bucketGrant) writesObjects() bool { return writes(g.Modes[objectData]) }

func reads(m cosiproto.AccessMode_Mode) bool {
	return m == cosiproto.AccessMode_READ_ONLY || m == cosiproto.AccessMode_READ_WRITE
}
func writes(m cosiproto.AccessMode_Mode) bool {
	return m == cosiproto.AccessMode_WRITE_ONLY || m == cosiproto.AccessMode_READ_WRITE
}

// bucketActions returns the actions g allows on the bucket and on its objects, sorted.
func (g bucketGrant) bucketActions() (bucket, object []string) {
	for c, mode := range g.Modes {
		set := actions[category(c)]
		if reads(mode) {
			bucket = append(bucket, set.readBucket...)
			object = append(object, set.readObject...)
		}
		if writes(mode) {
			bucket = append(bucket, set.writeBucket...)
			object = append(object, set.writeObject...)
		}
	}
	if g.LockObjects && g.writesObjects() {
		object = append(object, objectLockActions...)
	}
	slices.Sort(bucket)
	slices.Sort(object)
	return slices.Compact(bucket), slices.Compact(object)
}

// Statement is one statement of an IAM or bucket policy.
type Statement struct {
	Sid       string     `json:"Sid,omitempty"`
	Effect    string     `json:"Effect"`
	Principal *Principal `json:"Principal,omitempty"`
	Action    []string   `json:"Action"`
	Resource  []string   `json:"Resource"`
	// Condition maps a condition operator to keys and their values.
	Condition map[string]map[string][]string `json:"Condition,omitempty"`
}

// Principal names who a bucket-policy statement applies to.
type Principal struct {
	AWS []string `json:"AWS"`
}

// Policy is an IAM or bucket policy document.
type Policy struct {
	Version   string      `json:"Version"`
	Statement []Statement `json:"Statement"`
}

const policyVersion = "2012-10-17"

// The Sids of the two statements that grant one bucket: sidPrefix followed by these.
const (
	sidBucket  = "Bucket"
	sidObjects = "Objects"
)

// statements returns the statements granting g, with Sids starting with sidPrefix, without the
// actions in unknown (actions a store rejects in policies).
func (g bucketGrant) statements(sidPrefix string, principal *Principal, unknown map[string]bool) []Statement {
	bucketActs, objectActs := g.bucketActions()
	known := func(a string) bool { return unknown[a] }
	bucketActs = slices.DeleteFunc(bucketActs, known)
	objectActs = slices.DeleteFunc(objectActs, known)
	var out []Statement
	if len(bucketActs) > 0 {
		out = append(out, Statement{Sid: sidPrefix + sidBucket, Effect: "Allow", Principal: principal, Action: bucketActs,
			Resource: []string{"arn:aws:s3:::" + g.Bucket}})
	}
	if len(objectActs) > 0 {
		out = append(out, Statement{Sid: sidPrefix + sidObjects, Effect: "Allow", Principal: principal, Action: objectActs,
			Resource: []string{"arn:aws:s3:::" + g.Bucket + "/*"}})
	}
	return out
}

// MaxInlinePolicySize is AWS's limit on the total size of a user's inline policies, in
// characters, not counting white space.
const MaxInlinePolicySize = 2048

// userPolicy is the identity policy for an access to grants, as compact as the table allows:
// one statement per distinct list of actions, naming every resource it applies to, so that a
// bucket adds little more than its ARNs. It has no Sids: IAM does not need them, and each costs
// characters of the user's 2,048.
func userPolicy(grants []bucketGrant) Policy {
	p := Policy{Version: policyVersion}
	index := map[string]int{} // joined action list -> statement
	add := func(acts []string, resource string) {
		if len(acts) == 0 {
			return
		}
		key := strings.Join(acts, ",")
		i, ok := index[key]
		if !ok {
			i = len(p.Statement)
			index[key] = i
			p.Statement = append(p.Statement, Statement{Effect: "Allow", Action: acts})
		}
		if !slices.Contains(p.Statement[i].Resource, resource) {
			p.Statement[i].Resource = append(p.Statement[i].Resource, resource)
		}
	}
	for _, g := range grants {
		bucketActs, objectActs := g.bucketActions()
		add(bucketActs, "arn:aws:s3:::"+g.Bucket)
		add(objectActs, "arn:aws:s3:::"+g.Bucket+"/*")
	}
	return p
}

// policySize is the size of a policy document as IAM counts it against its limits: characters,
// white space not counted.
func policySize(doc []byte) int {
	n := 0
	for _, r := range string(doc) {
		if !unicode.IsSpace(r) {
			n++
		}
	}
	return n
}
