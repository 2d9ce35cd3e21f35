package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/drivers/v1alpha1s3"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// planter makes and revokes accounts in the backend behind COSI's back, for the self-check's
// plants: through the driver, by the names the self-check chooses, as an admin with access to it
// would.
type planter interface {
	// grant makes account (or grants it again: a new key) with a key to bucket.
	grant(ctx context.Context, account, bucket string, readOnly bool) (*cosiproto.CredentialInfo, error)
	// revoke revokes account's access to buckets (and the account with the last).
	revoke(ctx context.Context, account string, buckets []string) error
}

// planterV1alpha2 asks a v1alpha2 driver (the memory driver, or the S3 driver behind the proxy).
type planterV1alpha2 struct{ d *driverclient.Client }

func (p planterV1alpha2) grant(
	ctx context.Context, account, bucket string, readOnly bool,
) (*cosiproto.CredentialInfo, error) {
	mode := cosiproto.AccessMode_READ_WRITE
	if readOnly {
		mode = cosiproto.AccessMode_READ_ONLY
	}
	resp, err := p.d.DriverGrantBucketAccess(ctx, &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: account, Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
		Buckets: []*cosiproto.AccessedBucket{{BucketId: bucket, AccessModes: &cosiproto.AccessModes{ObjectData: mode}}},
	})
	return resp.GetCredentials(), err
}

func (p planterV1alpha2) revoke(ctx context.Context, account string, buckets []string) error {
	req := &cosiproto.DriverRevokeBucketAccessRequest{AccountId: account, Protocol: cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY}
	for _, b := range buckets {
		req.Buckets = append(req.Buckets, &cosiproto.DriverRevokeBucketAccessRequest_Bucket{BucketId: b})
	}
	_, err := p.d.DriverRevokeBucketAccess(ctx, req)
	return err
}

// planterV1alpha1 asks the v1alpha1 driver on its own socket, behind the proxy, which would name
// the accounts itself: the self-check chooses their names.
type planterV1alpha1 struct {
	conn *grpc.ClientConn
	p    v1.ProvisionerClient
}

func (r *run) newPlanterV1alpha1() (*planterV1alpha1, error) {
	conn, err := grpc.NewClient(r.driverEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &planterV1alpha1{conn: conn, p: v1.NewProvisionerClient(conn)}, nil
}

func (p *planterV1alpha1) close() error { return p.conn.Close() }

func (p *planterV1alpha1) grant(
	ctx context.Context, account, bucket string, readOnly bool,
) (*cosiproto.CredentialInfo, error) {
	resp, err := p.p.DriverGrantBucketAccess(ctx, &v1.DriverGrantBucketAccessRequest{BucketId: bucket, Name: account,
		AuthenticationType: v1.AuthenticationType_Key,
		Parameters:         map[string]string{v1alpha1s3.ParamReadOnly: fmt.Sprint(readOnly)}})
	if err != nil {
		return nil, fmt.Errorf("planting account %s on bucket %s: %w", account, bucket, err)
	}
	secrets := resp.GetCredentials()[v1alpha1.CredentialsS3].GetSecrets()
	return &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{AccessKeyId: secrets[v1alpha1.S3AccessKeyID],
		AccessSecretKey: secrets[v1alpha1.S3AccessSecretKey]}}, nil
}

func (p *planterV1alpha1) revoke(ctx context.Context, account string, buckets []string) error {
	for _, b := range buckets {
		if _, err := p.p.DriverRevokeBucketAccess(ctx, &v1.DriverRevokeBucketAccessRequest{BucketId: b,
			AccountId: account}); err != nil && status.Code(err) != codes.NotFound {
			return fmt.Errorf("revoking account %s on bucket %s: %w", account, b, err)
		}
	}
	return nil
}

// plantAccounts are the backend accounts of a kept access: the one its status names, or those a
// v1alpha1 driver named itself for it (its grant record's, read now: the access may be one the
// self-check created), newest last.
func (r *run) plantAccounts(ctx context.Context, a *accessRecord) ([]string, error) {
	if !r.v1alpha1() {
		return []string{a.accountID}, nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: grantNamespace,
		Name: grantRecordPrefix + string(a.uid)}}
	if err := r.get(ctx, cm); err != nil {
		return nil, fmt.Errorf("reading the grant record of %s/%s: %w", a.namespace, a.plan.name, err)
	}
	g, err := parseGrantView(cm)
	if err != nil {
		return nil, err
	}
	if len(g.DriverAccountIDs) == 0 {
		return nil, fmt.Errorf("the grant record of %s/%s names no account of the driver's", a.namespace, a.plan.name)
	}
	return g.DriverAccountIDs, nil
}

// plantAccount is the account of a kept access whose key its Secrets hold: the newest.
func (r *run) plantAccount(ctx context.Context, a *accessRecord) (string, error) {
	ids, err := r.plantAccounts(ctx, a)
	if err != nil {
		return "", err
	}
	return ids[len(ids)-1], nil
}

// plantLeaks (v1alpha1) plants leaked accounts of the driver's: an account granted on a kept
// access's bucket with a DriverAccountMayHaveLeaked event planted on that access (a reported leak,
// which the audit must list and not report), and an account under COSI's IAM path that reaches no
// bucket (backend account unaccounted). The unreported leak is planted-account, on
// planted-orphan, which no access reaches and no event reports (selfCheck). It returns the
// reported leak's account, or "" when the run kept no access to plant on.
func (r *run) plantLeaks(
	ctx context.Context, p planter, want func(check, object string), covered *accessRecord,
) (string, error) {
	s3b, ok := r.backend.(*s3Backend)
	if !ok {
		return "", errors.New("a v1alpha1 run without its S3 backend")
	}
	if _, err := s3b.iamAdmin.CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String("planted-bare"),
		Path: aws.String(s3.IAMPath)}); err != nil {
		return "", fmt.Errorf("planting IAM user planted-bare: %w", err)
	}
	want(CheckOrphanAccount, "backend account planted-bare")
	if covered == nil {
		return "", nil
	}
	bucket := covered.claims[0].backendBucket()
	if _, err := p.grant(ctx, "planted-covered", bucket, false); err != nil {
		return "", err
	}
	live := &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Namespace: covered.namespace, Name: covered.plan.name}}
	if err := r.get(ctx, live); err != nil {
		return "", err
	}
	now := metav1.NewMicroTime(time.Now())
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: covered.namespace, Name: covered.plan.name + ".planted-leak"},
		EventTime:  now, ReportingController: "chaos.cosi.kube-cosi.io/self-check", ReportingInstance: "self-check",
		Action: "DriverGrantBucketAccess", Reason: cosiapi.EventDriverAccountMayHaveLeaked, Type: corev1.EventTypeWarning,
		Regarding: corev1.ObjectReference{Kind: "BucketAccess", APIVersion: cosiapi.SchemeGroupVersion.String(),
			Namespace: live.Namespace, Name: live.Name, UID: live.UID},
		Note: "planted by the self-check: account planted-covered of bucket " + bucket + " may have leaked",
	}
	if err := r.create(ctx, ev); err != nil {
		return "", err
	}
	return "planted-covered", nil
}

// reportedAsLeak reports whether the audit listed the account among the reported leaks.
func (r *run) reportedAsLeak(account string) bool {
	return slices.ContainsFunc(r.res.ReportedLeaks, func(l string) bool {
		return strings.HasPrefix(l, "account "+account+" ")
	})
}
