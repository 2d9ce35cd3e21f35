package s3

import (
	"slices"
	"strconv"

	cosi "github.com/kube-cosi/cosi/proto"
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

// Actions maps each category to S3 actions; docs/drivers/s3.md shows the same table. It is
// deliberately explicit (no wildcards) so that a new S3 action is never granted by accident.
//
// Never granted, whatever the mode: actions that change who may access the bucket or that
// delete it (bucket policy, bucket ACL, public access block, ownership controls, DeleteBucket,
// CreateBucket) and s3:BypassGovernanceRetention. A workload must not be able to widen its own
// access or destroy what the BucketClaim owns.
var actions = map[category]actionSet{
	objectData: {
		readBucket:  []string{"s3:ListBucket", "s3:ListBucketVersions", "s3:ListBucketMultipartUploads"},
		readObject:  []string{"s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectAttributes", "s3:GetObjectVersionAttributes", "s3:ListMultipartUploadParts"},
		writeObject: []string{"s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:AbortMultipartUpload", "s3:RestoreObject"},
	},
	objectMetadata: {
		readObject: []string{"s3:GetObjectTagging", "s3:GetObjectVersionTagging", "s3:GetObjectAcl", "s3:GetObjectVersionAcl",
			"s3:GetObjectRetention", "s3:GetObjectLegalHold"},
		writeObject: []string{"s3:PutObjectTagging", "s3:PutObjectVersionTagging", "s3:DeleteObjectTagging", "s3:DeleteObjectVersionTagging",
			"s3:PutObjectAcl", "s3:PutObjectVersionAcl", "s3:PutObjectRetention", "s3:PutObjectLegalHold"},
	},
	bucketMetadata: {
		readBucket: []string{"s3:GetBucketLocation", "s3:GetBucketTagging", "s3:GetBucketVersioning", "s3:GetBucketAcl",
			"s3:GetBucketPolicy", "s3:GetBucketCORS", "s3:GetLifecycleConfiguration", "s3:GetBucketObjectLockConfiguration",
			"s3:GetEncryptionConfiguration", "s3:GetBucketOwnershipControls"},
		writeBucket: []string{"s3:PutBucketTagging", "s3:PutBucketVersioning", "s3:PutBucketCORS", "s3:PutLifecycleConfiguration",
			"s3:PutBucketObjectLockConfiguration", "s3:PutEncryptionConfiguration"},
	},
}

// bucketGrant is what one access may do in one bucket.
type bucketGrant struct {
	Bucket string
	Modes  [3]cosi.AccessMode_Mode // indexed by category
}

func grantFor(b *cosi.AccessedBucket) bucketGrant {
	m := b.GetAccessModes()
	return bucketGrant{Bucket: b.GetBucketId(), Modes: [3]cosi.AccessMode_Mode{m.GetObjectData(), m.GetObjectMetadata(), m.GetBucketMetadata()}}
}

func reads(m cosi.AccessMode_Mode) bool {
	return m == cosi.AccessMode_READ_ONLY || m == cosi.AccessMode_READ_WRITE
}
func writes(m cosi.AccessMode_Mode) bool {
	return m == cosi.AccessMode_WRITE_ONLY || m == cosi.AccessMode_READ_WRITE
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

// statements returns the statements granting g, with Sids starting with sidPrefix, without the
// actions in unknown (actions a store rejects in policies).
func (g bucketGrant) statements(sidPrefix string, principal *Principal, unknown map[string]bool) []Statement {
	bucketActs, objectActs := g.bucketActions()
	known := func(a string) bool { return unknown[a] }
	bucketActs = slices.DeleteFunc(bucketActs, known)
	objectActs = slices.DeleteFunc(objectActs, known)
	var out []Statement
	if len(bucketActs) > 0 {
		out = append(out, Statement{Sid: sidPrefix + "Bucket", Effect: "Allow", Principal: principal, Action: bucketActs,
			Resource: []string{"arn:aws:s3:::" + g.Bucket}})
	}
	if len(objectActs) > 0 {
		out = append(out, Statement{Sid: sidPrefix + "Objects", Effect: "Allow", Principal: principal, Action: objectActs,
			Resource: []string{"arn:aws:s3:::" + g.Bucket + "/*"}})
	}
	return out
}

// userPolicy is the identity policy for an access to grants.
func userPolicy(grants []bucketGrant) Policy {
	p := Policy{Version: policyVersion}
	for i, g := range grants {
		p.Statement = append(p.Statement, g.statements(sid("Cosi", i), nil, nil)...)
	}
	return p
}

// sid returns an alphanumeric statement ID (IAM allows only [A-Za-z0-9] in Sids).
func sid(prefix string, i int) string {
	return prefix + "B" + strconv.Itoa(i)
}
