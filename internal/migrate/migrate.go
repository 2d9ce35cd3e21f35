// Package migrate is cosi-migrate: it reads the objects of the upstream COSI v1alpha1 release
// (objectstorage.k8s.io/v1alpha1 BucketClasses, BucketAccessClasses, BucketClaims, Buckets and
// BucketAccesses) and writes their v1alpha2 equivalents: classes as they are, every provisioned
// Bucket as a static (imported) v1alpha2 Bucket bound to its claim, each claim as a claim of that
// Bucket, and each access as a new access (new credentials) for the same claim. The migration
// order is in docs/v1alpha1-drivers.md.
package migrate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

// V1alpha1 is the group version of the upstream v1alpha1 release.
var V1alpha1 = schema.GroupVersion{Group: cosiapi.GroupName, Version: "v1alpha1"}

// Options tune the conversion.
type Options struct {
	// SecretSuffix is appended to each access's Secret name, so that the v1alpha2 Secret does not
	// collide with the v1alpha1 one workloads still mount; empty keeps the name (delete the old
	// Secret first).
	SecretSuffix string
}

// Result is what the conversion produced, in the order to create it, and what it skipped.
type Result struct {
	Objects []client.Object
	// Skipped says, per v1alpha1 object, why it has no equivalent (a claim whose bucket was never
	// provisioned, say).
	Skipped []string
}

// Read lists the v1alpha1 objects through c (which reads them as unstructured) and converts them.
func Read(ctx context.Context, c client.Reader, opts Options) (*Result, error) {
	lists := map[string][]unstructured.Unstructured{}
	for _, kind := range []string{"BucketClass", "BucketAccessClass", "Bucket", "BucketClaim", "BucketAccess"} {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(V1alpha1.WithKind(kind + "List"))
		if err := c.List(ctx, l); err != nil {
			return nil, fmt.Errorf("listing v1alpha1 %ss: %w", kind, err)
		}
		lists[kind] = l.Items
	}
	return Convert(lists, opts), nil
}

// Convert converts v1alpha1 objects, by kind, to v1alpha2 objects.
func Convert(in map[string][]unstructured.Unstructured, opts Options) *Result {
	r := &Result{}
	for _, u := range in["BucketClass"] {
		r.Objects = append(r.Objects, &cosiapi.BucketClass{ObjectMeta: meta(u), Spec: cosiapi.BucketClassSpec{
			DriverName: str(
				u,
				"driverName",
			),
			DeletionPolicy: cosiapi.DeletionPolicy(str(u, "deletionPolicy")),
			Parameters:     strMap(u, "parameters"),
		}})
	}
	for _, u := range in["BucketAccessClass"] {
		params := strMap(u, "parameters")
		auth := cosiapi.AuthenticationTypeKey
		if str(u, "authenticationType") == "IAM" {
			auth = cosiapi.AuthenticationTypeServiceAccount
		}
		// What v1alpha1 drivers grant: read and write of objects. Declared, so that the sidecar's
		// adapter accepts exactly the accesses written below.
		if _, ok := params[v1alpha1.ParameterAccessModes]; !ok {
			if params == nil {
				params = map[string]string{}
			}
			params[v1alpha1.ParameterAccessModes] = v1alpha1.DefaultAccessModes
		}
		r.Objects = append(r.Objects, &cosiapi.BucketAccessClass{ObjectMeta: meta(u), Spec: cosiapi.BucketAccessClassSpec{
			DriverName: str(u, "driverName"), AuthenticationType: auth, Parameters: params,
		}})
	}
	bucketOfClaim := map[string]string{} // namespace/claim -> bucket name
	for _, u := range in["Bucket"] {
		id := str(u, "status", "bucketID")
		claimNS, claimName := str(u, "spec", "bucketClaim", "namespace"), str(u, "spec", "bucketClaim", "name")
		if id == "" || claimName == "" {
			r.Skipped = append(
				r.Skipped,
				fmt.Sprintf("Bucket %s: no status.bucketID or no claim; nothing to import", u.GetName()),
			)
			continue
		}
		bucketOfClaim[claimNS+"/"+claimName] = u.GetName()
		r.Objects = append(r.Objects, &cosiapi.Bucket{ObjectMeta: meta(u), Spec: cosiapi.BucketSpec{
			DriverName: str(u, "spec", "driverName"),
			// Imported buckets are never deleted by COSI: the data outlives the migration.
			DeletionPolicy:   cosiapi.DeletionPolicyRetain,
			ExistingBucketID: id,
			Parameters:       strMap(u, "spec", "parameters"),
			Protocols: protocols(
				strSlice(u, "spec", "protocols"),
			),
			BucketClaimRef: cosiapi.BucketClaimReference{Namespace: claimNS, Name: claimName},
		}})
	}
	for _, u := range in["BucketClaim"] {
		bucket := bucketOfClaim[u.GetNamespace()+"/"+u.GetName()]
		if bucket == "" {
			r.Skipped = append(
				r.Skipped,
				fmt.Sprintf("BucketClaim %s/%s: no provisioned v1alpha1 Bucket", u.GetNamespace(), u.GetName()),
			)
			continue
		}
		r.Objects = append(r.Objects, &cosiapi.BucketClaim{ObjectMeta: meta(u), Spec: cosiapi.BucketClaimSpec{
			ExistingBucketName: bucket, Protocols: protocols(strSlice(u, "spec", "protocols")),
		}})
	}
	for _, u := range in["BucketAccess"] {
		claim := str(u, "spec", "bucketClaimName")
		if bucketOfClaim[u.GetNamespace()+"/"+claim] == "" {
			r.Skipped = append(
				r.Skipped,
				fmt.Sprintf("BucketAccess %s/%s: its claim %s is not migrated", u.GetNamespace(), u.GetName(), claim),
			)
			continue
		}
		secret := str(u, "spec", "credentialsSecretName")
		if secret == "" {
			secret = u.GetName()
		}
		protocol := protocols([]string{str(u, "spec", "protocol")})
		if len(protocol) == 0 {
			protocol = []cosiapi.Protocol{cosiapi.ProtocolS3}
		}
		r.Objects = append(r.Objects, &cosiapi.BucketAccess{ObjectMeta: meta(u), Spec: cosiapi.BucketAccessSpec{
			BucketAccessClassName: str(u, "spec", "bucketAccessClassName"), Protocol: protocol[0],
			ServiceAccountName: str(u, "spec", "serviceAccountName"),
			BucketClaims: []cosiapi.BucketClaimAccess{{BucketClaimName: claim, AccessSecretName: secret + opts.SecretSuffix,
				AccessModes: cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadWrite}}},
		}})
	}
	for _, o := range r.Objects {
		o.GetObjectKind().SetGroupVersionKind(cosiapi.SchemeGroupVersion.WithKind(kindOf(o)))
	}
	return r
}

// Apply creates the objects; with dryRun, the API server validates them and stores nothing.
func Apply(ctx context.Context, c client.Client, objs []client.Object, dryRun bool) error {
	var opts []client.CreateOption
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	for _, o := range objs {
		if err := c.Create(ctx, o, opts...); err != nil {
			return fmt.Errorf("creating %s %s: %w", kindOf(o), client.ObjectKeyFromObject(o), err)
		}
	}
	return nil
}

func kindOf(o client.Object) string {
	switch o.(type) {
	case *cosiapi.BucketClass:
		return "BucketClass"
	case *cosiapi.BucketAccessClass:
		return "BucketAccessClass"
	case *cosiapi.Bucket:
		return "Bucket"
	case *cosiapi.BucketClaim:
		return "BucketClaim"
	case *cosiapi.BucketAccess:
		return "BucketAccess"
	}
	return ""
}

// meta keeps name, namespace and labels, and records where the object came from.
func meta(u unstructured.Unstructured) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), Labels: u.GetLabels(),
		Annotations: map[string]string{cosiapi.GroupName + "/migrated-from": "v1alpha1"}}
}

func str(u unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, path...)
	return s
}

func strMap(u unstructured.Unstructured, path ...string) map[string]string {
	m, _, _ := unstructured.NestedStringMap(u.Object, path...)
	if len(m) == 0 {
		return nil
	}
	return m
}

func strSlice(u unstructured.Unstructured, path ...string) []string {
	s, _, _ := unstructured.NestedStringSlice(u.Object, path...)
	return s
}

// protocols maps v1alpha1's protocol names (s3, azure, gcs) to v1alpha2's.
func protocols(in []string) []cosiapi.Protocol {
	var out []cosiapi.Protocol
	for _, p := range in {
		var v cosiapi.Protocol
		switch strings.ToLower(p) {
		case "s3":
			v = cosiapi.ProtocolS3
		case "azure":
			v = cosiapi.ProtocolAzure
		case "gcs":
			v = cosiapi.ProtocolGCS
		default:
			continue
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
