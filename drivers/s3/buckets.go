package s3

import (
	"context"
	"errors"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// bucketState is what HeadBucket with the driver's identity says about a bucket name.
type bucketState int

const (
	bucketMissing bucketState = iota
	bucketExists
	// bucketForbidden is a bucket the driver's identity may not access: another account's, or
	// one whose policy keeps the driver out. It is never imported or granted.
	bucketForbidden
)

// lookupBucket asks the store about bucket id. HeadBucket answers 403 without a body, both for a
// bucket the identity may not access and for an identity the store does not accept (a rotated
// key): GetBucketLocation, whose error has a code, tells the two apart, and the second is a
// retryable error, not a statement about the bucket.
func (d *Driver) lookupBucket(ctx context.Context, id string) (bucketState, error) {
	_, err := d.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(id)})
	var notFound *types.NotFound
	switch {
	case err == nil:
		return bucketExists, nil
	case errors.As(err, &notFound), apiCode(err) == "NoSuchBucket", httpStatus(err) == http.StatusNotFound:
		return bucketMissing, nil
	case httpStatus(err) != http.StatusForbidden:
		return bucketMissing, toStatus(err, "looking up bucket %q", id)
	}
	_, err = d.s3.GetBucketLocation(ctx, &s3.GetBucketLocationInput{Bucket: aws.String(id)})
	switch code := apiCode(err); {
	case err == nil:
		return bucketExists, nil
	case code == "AccessDenied", code == "" && httpStatus(err) == http.StatusForbidden:
		return bucketForbidden, nil
	case code == "NoSuchBucket":
		return bucketMissing, nil
	}
	return bucketMissing, toStatus(err, "looking up bucket %q", id)
}

// bucketExists reports whether bucket id exists, for a name the driver generates: a bucket the
// driver's identity may not access exists (it belongs to someone else).
func (d *Driver) bucketExists(ctx context.Context, id string) (bool, error) {
	state, err := d.lookupBucket(ctx, id)
	return state != bucketMissing, err
}

// existingBucket returns nil when bucket id exists and the driver's identity may access it, for
// a bucket to import or grant: NotFound when it does not exist, FailedPrecondition (retried: an
// admin may fix it) when the driver may not access it.
func (d *Driver) existingBucket(ctx context.Context, id string) error {
	state, err := d.lookupBucket(ctx, id)
	switch {
	case err != nil:
		return err
	case state == bucketMissing:
		return status.Errorf(codes.NotFound, "bucket %q does not exist", id)
	case state == bucketForbidden:
		return status.Errorf(
			codes.FailedPrecondition,
			"bucket %q exists but the driver's identity may not access it, so it is neither imported nor granted: "+
				"its owner must give the driver's identity access, or use another bucket",
			id,
		)
	}
	return nil
}

// ownership is what the driver knows about who made a bucket.
type ownership int

const (
	ownedByDriver ownership = iota // tagged by this driver
	unfinished                     // the admin's, untagged and empty: a creation not finished
	foreign
)

func (d *Driver) ownership(ctx context.Context, id string) (ownership, error) {
	out, err := d.s3.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String(id)})
	switch {
	case err == nil:
		for _, t := range out.TagSet {
			if aws.ToString(t.Key) == OwnerTag {
				if aws.ToString(t.Value) == d.cfg.Name {
					return ownedByDriver, nil
				}
				return foreign, nil
			}
		}
		if len(out.TagSet) > 0 {
			return foreign, nil
		}
	case apiCode(err) == "NoSuchTagSet" || apiCode(err) == "NoSuchTagSetError":
	case httpStatus(err) == http.StatusForbidden:
		return foreign, nil
	default:
		return foreign, toStatus(err, "reading the tags of bucket %q", id)
	}
	list, err := d.s3.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(id), MaxKeys: aws.Int32(1)})
	if err != nil {
		if httpStatus(err) == http.StatusForbidden {
			return foreign, nil
		}
		return foreign, toStatus(err, "listing bucket %q", id)
	}
	if len(list.Versions) > 0 || len(list.DeleteMarkers) > 0 {
		return foreign, nil
	}
	return unfinished, nil
}

// checkOurs returns AlreadyExists unless bucket id was created by the driver (or is an unfinished
// creation of it, which adopt tags).
func (d *Driver) checkOurs(ctx context.Context, id string, adopt bool) error {
	o, err := d.ownership(ctx, id)
	if err != nil {
		return err
	}
	if o == foreign {
		return status.Errorf(
			codes.AlreadyExists,
			"bucket %q exists and was not created by this driver (it has no %s=%s tag); "+
				"choose another name or import it as a static bucket",
			id,
			OwnerTag,
			d.cfg.Name,
		)
	}
	if o == unfinished && adopt {
		return d.tagBucket(ctx, id)
	}
	return nil
}

func (d *Driver) tagBucket(ctx context.Context, id string) error {
	_, err := d.s3.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String(id),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String(OwnerTag), Value: aws.String(d.cfg.Name)}}}})
	return toStatus(err, "tagging bucket %q", id)
}

// checkCompatible returns AlreadyExists when the bucket's configuration contradicts p. With
// defaults, unset parameters are compared with their defaults (a dynamic bucket must be exactly
// what its class asks for); without, only parameters that are set are compared (a static bucket
// is what the admin made it).
func (d *Driver) checkCompatible(ctx context.Context, id string, p bucketParams, defaults bool) error {
	if defaults || p.versioningSet || p.objectLockSet {
		v, err := d.s3.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String(id)})
		if err != nil {
			return toStatus(err, "reading the versioning of bucket %q", id)
		}
		enabled := v.Status == types.BucketVersioningStatusEnabled
		if want := p.versioning || p.objectLock; (defaults || p.versioningSet) && enabled != want {
			return status.Errorf(
				codes.AlreadyExists,
				"bucket %q exists with versioning %s, the parameters ask for %s=%v",
				id,
				onOff(enabled),
				ParamVersioning,
				want,
			)
		}
	}
	if defaults || p.objectLockSet {
		locked, err := d.objectLockEnabled(ctx, id)
		if err != nil {
			return err
		}
		if locked != p.objectLock {
			return status.Errorf(
				codes.AlreadyExists,
				"bucket %q exists with object lock %s, the parameters ask for %s=%v",
				id,
				onOff(locked),
				ParamObjectLock,
				p.objectLock,
			)
		}
	}
	return nil
}

// objectLockEnabled reports whether bucket id has Object Lock enabled.
func (d *Driver) objectLockEnabled(ctx context.Context, id string) (bool, error) {
	out, err := d.s3.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(id)})
	switch {
	case err == nil:
		return out.ObjectLockConfiguration != nil &&
			out.ObjectLockConfiguration.ObjectLockEnabled == types.ObjectLockEnabledEnabled, nil
	case apiCode(err) == "ObjectLockConfigurationNotFoundError", httpStatus(err) == http.StatusNotFound:
		return false, nil
	}
	return false, toStatus(err, "reading the object lock configuration of bucket %q", id)
}

// ensureIgnorePublicACLs sets IgnorePublicAcls in the public access block of bucket id, which the
// driver created, when the account back-end asks for it (publicACLIgnorer); the block's other
// settings stay as they are. Public ACLs (AllUsers, AuthenticatedUsers) then give nobody access,
// however an object got them. Only IgnorePublicAcls: on Ceph RGW 16, BlockPublicAcls refuses
// every upload (AccessDenied, with or without an ACL header), and BlockPublicPolicy and
// RestrictPublicBuckets concern bucket policies, which no access may write. A store that cannot
// set it fails the creation (InvalidArgument for NotImplemented): the driver does not create
// buckets whose objects its workloads could publish.
func (d *Driver) ensureIgnorePublicACLs(ctx context.Context, id string) error {
	if !d.ignorePublicACLs {
		return nil
	}
	var cfg types.PublicAccessBlockConfiguration
	out, err := d.s3.GetPublicAccessBlock(ctx, &s3.GetPublicAccessBlockInput{Bucket: aws.String(id)})
	switch {
	case err == nil:
		if out.PublicAccessBlockConfiguration != nil {
			cfg = *out.PublicAccessBlockConfiguration
		}
	case apiCode(err) == "NoSuchPublicAccessBlockConfiguration", httpStatus(err) == http.StatusNotFound:
	default:
		return toStatus(err, "reading the public access block of bucket %q", id)
	}
	if aws.ToBool(cfg.IgnorePublicAcls) {
		return nil
	}
	_, err = d.s3.PutPublicAccessBlock(ctx, &s3.PutPublicAccessBlockInput{Bucket: aws.String(id),
		PublicAccessBlockConfiguration: &types.PublicAccessBlockConfiguration{
			IgnorePublicAcls:      aws.Bool(true),
			BlockPublicAcls:       aws.Bool(aws.ToBool(cfg.BlockPublicAcls)),
			BlockPublicPolicy:     aws.Bool(aws.ToBool(cfg.BlockPublicPolicy)),
			RestrictPublicBuckets: aws.Bool(aws.ToBool(cfg.RestrictPublicBuckets)),
		}})
	return toStatus(err, "setting IgnorePublicAcls in the public access block of bucket %q", id)
}

func onOff(b bool) string {
	if b {
		return "enabled"
	}
	return "disabled"
}

// bucketRegion returns the bucket's region as the store reports it.
func (d *Driver) bucketRegion(ctx context.Context, id string) (string, error) {
	out, err := d.s3.GetBucketLocation(ctx, &s3.GetBucketLocationInput{Bucket: aws.String(id)})
	if err != nil {
		return "", toStatus(err, "reading the location of bucket %q", id)
	}
	if out.LocationConstraint == "" {
		return "us-east-1", nil
	}
	return string(out.LocationConstraint), nil
}

// purge deletes every object version, delete marker and unfinished multipart upload of bucket id.
func (d *Driver) purge(ctx context.Context, id string) error {
	pages := s3.NewListObjectVersionsPaginator(d.s3, &s3.ListObjectVersionsInput{Bucket: aws.String(id)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if apiCode(err) == "NoSuchBucket" {
			return nil
		}
		if err != nil {
			return toStatus(err, "listing the objects of bucket %q to purge it", id)
		}
		var objects []types.ObjectIdentifier
		for _, v := range page.Versions {
			objects = append(objects, types.ObjectIdentifier{Key: v.Key, VersionId: v.VersionId})
		}
		for _, m := range page.DeleteMarkers {
			objects = append(objects, types.ObjectIdentifier{Key: m.Key, VersionId: m.VersionId})
		}
		if len(objects) == 0 {
			continue
		}
		out, err := d.s3.DeleteObjects(
			ctx,
			&s3.DeleteObjectsInput{Bucket: aws.String(id), Delete: &types.Delete{Objects: objects, Quiet: aws.Bool(true)}},
		)
		if err != nil {
			return toStatus(err, "purging bucket %q", id)
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			// The store's message stays out (see backendError); its code says enough.
			return status.Errorf(codes.FailedPrecondition, "purging bucket %q: %d objects could not be deleted, e.g. %q (%s)",
				id, len(out.Errors), aws.ToString(e.Key), aws.ToString(e.Code))
		}
	}
	uploads := s3.NewListMultipartUploadsPaginator(d.s3, &s3.ListMultipartUploadsInput{Bucket: aws.String(id)})
	for uploads.HasMorePages() {
		page, err := uploads.NextPage(ctx)
		if err != nil {
			return toStatus(err, "listing the unfinished uploads of bucket %q to purge it", id)
		}
		for _, u := range page.Uploads {
			_, err := d.s3.AbortMultipartUpload(
				ctx,
				&s3.AbortMultipartUploadInput{Bucket: aws.String(id), Key: u.Key, UploadId: u.UploadId},
			)
			if err != nil && apiCode(err) != "NoSuchUpload" {
				return toStatus(err, "aborting an unfinished upload in bucket %q", id)
			}
		}
	}
	return nil
}
