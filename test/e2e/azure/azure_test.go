// Package azure runs KEP-1979's flows against the Azure Blob driver (cosi-driver-azure) as a
// process behind the real cosi-sidecar and cosi-controller, with Azurite enforcing the shared
// access signatures the driver issues: what a user sees in conditions and Secrets, and what the
// Secret's token, used alone as a workload uses it, can and cannot do.
package azure

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/store/azurite"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/drivers/azure"
	"github.com/kube-cosi/cosi/test/e2e/framework"
)

var (
	fw *framework.Framework
	// admin is the storage account's Blob service with its Shared Key, to look at it directly.
	admin *service.Client
	// skipReason is why the suite cannot run here (Azurite is not installed), or "".
	skipReason string
)

func TestMain(m *testing.M) {
	root, err := localenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := azurite.Installed(azurite.Binary(filepath.Join(root, "bin"))); err != nil {
		skipReason = "Azurite is not installed on this machine (" + err.Error() + "): the Azure driver's " +
			"end-to-end flows are not tested here"
		os.Exit(m.Run())
	}
	opts := localenv.Options{Driver: localenv.DriverAzure, Verbosity: 5}
	testenv.RunSystem(m, opts, func(_ context.Context, e *localenv.Env) error {
		fw = framework.New(e, azure.DefaultName, "az")
		cred, err := azblob.NewSharedKeyCredential(e.Azurite.Account, e.Azurite.Key)
		if err != nil {
			return err
		}
		admin, err = service.NewClientWithSharedKeyCredential(e.Azurite.Endpoint+"/", cred, nil)
		return err
	})
}

func requireAzurite(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

var readWrite, readOnly = objects.ReadWrite, objects.ReadOnly

// claim is an Azure claim of class in ns.
func claim(ns, class string) *cosiapi.BucketClaim {
	return objects.BucketClaim(ns, framework.Unique("claim"), class, objects.Protocols(cosiapi.ProtocolAzure))
}

// access is an Azure access of class to one claim, whose Secret is named after the access.
func access(ns, class string, modes cosiapi.BucketAccessModes, c *cosiapi.BucketClaim) *cosiapi.BucketAccess {
	name := framework.Unique("access")
	a := objects.BucketAccess(ns, name, class, objects.Grant(c.Name, name, modes))
	a.Spec.Protocol = cosiapi.ProtocolAzure
	return a
}

// accessClass is a Key access class of the Azure driver with params.
func accessClass(params map[string]string) *cosiapi.BucketAccessClass {
	return objects.BucketAccessClass(framework.Unique("access-class"), azure.DefaultName,
		func(c *cosiapi.BucketAccessClass) {
			c.Spec.AuthenticationType = cosiapi.AuthenticationTypeKey
			c.Spec.MultiBucketAccess = cosiapi.MultiBucketAccessSingleBucket
		}, objects.AccessParameters(params))
}

// secret reads the Secret of access a.
func secret(t *testing.T, a *cosiapi.BucketAccess) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.BucketClaims[0].AccessSecretName}
	if err := fw.Env.Client.Get(t.Context(), key, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// tokenClient is the container client a workload builds from the Secret alone.
func tokenClient(t *testing.T, s *corev1.Secret) *container.Client {
	t.Helper()
	c, err := localenv.BlobContainerClient(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func put(t *testing.T, c *container.Client, name string) error {
	t.Helper()
	_, err := c.NewBlockBlobClient(name).UploadBuffer(t.Context(), []byte("data of "+name), nil)
	return err
}

func get(t *testing.T, c *container.Client, name string) error {
	t.Helper()
	resp, err := c.NewBlobClient(name).DownloadStream(t.Context(), nil)
	if err == nil {
		_ = resp.Body.Close()
	}
	return err
}

func refused(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusForbidden
}

func containerExists(t *testing.T, name string) bool {
	t.Helper()
	_, err := admin.NewContainerClient(name).GetProperties(t.Context(), nil)
	if bloberror.HasCode(err, bloberror.ContainerNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// A claim gets a container; an access gets a Secret with exactly the KEP's Azure keys, whose token
// alone reads and writes the container; a read-only access cannot write; deleting an access
// revokes its token; deleting the claim of a Delete class deletes the container.
func TestDynamicLifecycle(t *testing.T) {
	requireAzurite(t)
	ns := fw.Namespace(t)
	class := fw.BucketClass(cosiapi.DeletionPolicyDelete, map[string]string{azure.ParamPurgeOnDelete: "true"})
	ac := accessClass(map[string]string{azure.ParamSASExpiry: "1h"})
	c := claim(ns, class.Name)
	fw.Create(t, class, ac, c)
	fw.Provisioned(t, c)
	bucket := fw.BackendBucket(t, c)
	if !containerExists(t, bucket) {
		t.Fatalf("container %q of the provisioned claim does not exist", bucket)
	}

	rw := access(ns, ac.Name, readWrite, c)
	ro := access(ns, ac.Name, readOnly, c)
	fw.Create(t, rw, ro)
	fw.Provisioned(t, rw, ro)
	s := secret(t, rw)
	keys := slices.Sorted(maps.Keys(s.Data))
	want := []string{cosiapi.SecretKeyAzureStorageAccount, cosiapi.SecretKeyAzureSASToken,
		cosiapi.SecretKeyAzureSASTokenExpiry, cosiapi.SecretKeyProtocol}
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("Secret keys %v, want %v", keys, want)
	}
	if got := string(s.Data[cosiapi.SecretKeyAzureStorageAccount]); got != fw.Env.Azurite.Account {
		t.Errorf("%s = %q, want %q", cosiapi.SecretKeyAzureStorageAccount, got, fw.Env.Azurite.Account)
	}
	expiry, err := time.Parse(time.RFC3339, string(s.Data[cosiapi.SecretKeyAzureSASTokenExpiry]))
	if err != nil || expiry.Before(time.Now().Add(50*time.Minute)) || expiry.After(time.Now().Add(61*time.Minute)) {
		t.Errorf("%s = %q (%v), want about an hour from now", cosiapi.SecretKeyAzureSASTokenExpiry,
			s.Data[cosiapi.SecretKeyAzureSASTokenExpiry], err)
	}
	noSignatureInLogs(t, s)
	writer := tokenClient(t, s)
	if err := put(t, writer, "a"); err != nil {
		t.Errorf("put with the read-write token: %v", err)
	}
	if err := get(t, writer, "a"); err != nil {
		t.Errorf("get with the read-write token: %v", err)
	}
	reader := tokenClient(t, secret(t, ro))
	if err := get(t, reader, "a"); err != nil {
		t.Errorf("get with the read-only token: %v", err)
	}
	if err := put(t, reader, "b"); !refused(err) {
		t.Errorf("put with the read-only token: %v, want refused (403)", err)
	}

	fw.Delete(t, rw)
	fw.Waits.Gone(t, rw)
	if err := get(t, writer, "a"); !refused(err) {
		t.Errorf("get with the token of a deleted access: %v, want refused (403)", err)
	}
	if err := get(t, reader, "a"); err != nil {
		t.Errorf("the other access, after one was deleted: %v", err)
	}
	fw.Delete(t, ro)
	fw.Waits.Gone(t, ro)
	fw.Delete(t, c)
	fw.Waits.Gone(t, c)
	testenv.Eventually(t, func() error {
		if containerExists(t, bucket) {
			return fmt.Errorf("container %q still exists", bucket)
		}
		return nil
	})
}

// A Retain class keeps the container, with its blobs, after the claim is gone.
func TestRetain(t *testing.T) {
	requireAzurite(t)
	ns := fw.Namespace(t)
	class := fw.BucketClass(cosiapi.DeletionPolicyRetain, nil)
	c := claim(ns, class.Name)
	fw.Create(t, class, c)
	fw.Provisioned(t, c)
	bucket := fw.BackendBucket(t, c)
	if _, err := admin.NewContainerClient(bucket).NewBlockBlobClient("kept").UploadBuffer(t.Context(),
		[]byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	fw.Delete(t, c)
	fw.Waits.Gone(t, c)
	testenv.Never(t, 2*time.Second, func() error {
		resp, err := admin.NewContainerClient(bucket).NewBlobClient("kept").DownloadStream(t.Context(), nil)
		if err != nil {
			return fmt.Errorf("the retained blob: %w", err)
		}
		return resp.Body.Close()
	})
	_, _ = admin.NewContainerClient(bucket).Delete(context.Background(), nil)
}

// An admin imports an existing container (a static Bucket); a claim binds to it and an access's
// token reads what was there.
func TestStaticImport(t *testing.T) {
	requireAzurite(t)
	ns := fw.Namespace(t)
	name := "existing-" + strings.ToLower(rand.Text()[:8])
	existing := admin.NewContainerClient(name)
	if _, err := existing.Create(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = existing.Delete(context.Background(), nil) })
	if _, err := existing.NewBlockBlobClient("old").UploadBuffer(t.Context(), []byte("old data"), nil); err != nil {
		t.Fatal(err)
	}
	ac := accessClass(nil)
	c := &cosiapi.BucketClaim{
		ObjectMeta: metav1.ObjectMeta{Name: framework.Unique("legacy"), Namespace: ns},
		Spec: cosiapi.BucketClaimSpec{
			ExistingBucketName: framework.Unique("static"),
			Protocols:          []cosiapi.Protocol{cosiapi.ProtocolAzure},
		},
	}
	b := &cosiapi.Bucket{
		ObjectMeta: metav1.ObjectMeta{Name: c.Spec.ExistingBucketName},
		Spec: cosiapi.BucketSpec{
			DriverName:       azure.DefaultName,
			DeletionPolicy:   cosiapi.DeletionPolicyRetain,
			ExistingBucketID: name,
			Protocols:        []cosiapi.Protocol{cosiapi.ProtocolAzure},
			BucketClaimRef:   cosiapi.BucketClaimReference{Name: c.Name, Namespace: ns},
		},
	}
	fw.Create(t, ac, b, c)
	fw.Provisioned(t, c)
	a := access(ns, ac.Name, readOnly, c)
	fw.Create(t, a)
	fw.Provisioned(t, a)
	s := secret(t, a)
	if got := string(s.Data[cosiapi.SecretKeyAzureSASTokenExpiry]); got != "" {
		t.Errorf("%s = %q without sasExpiry, want empty", cosiapi.SecretKeyAzureSASTokenExpiry, got)
	}
	if err := get(t, tokenClient(t, s), "old"); err != nil {
		t.Errorf("get of the imported container's blob with the token: %v", err)
	}
	fw.Delete(t, a)
	fw.Waits.Gone(t, a)
}

// A container serves four accesses at a time (Azure's five stored access policies, one kept for
// renewals and rotations): the fifth is refused for good, its Provisioned condition False saying
// why, and stays refused when another is deleted; it holds back neither the claim's deletion nor
// the others.
func TestFifthAccessRefused(t *testing.T) {
	requireAzurite(t)
	ns := fw.Namespace(t)
	class := fw.BucketClass(cosiapi.DeletionPolicyDelete, map[string]string{azure.ParamPurgeOnDelete: "true"})
	ac := accessClass(nil)
	c := claim(ns, class.Name)
	fw.Create(t, class, ac, c)
	fw.Provisioned(t, c)
	var four []*cosiapi.BucketAccess
	for range azure.MaxStoredAccessPolicies - 1 {
		a := access(ns, ac.Name, readWrite, c)
		fw.Create(t, a)
		fw.Provisioned(t, a)
		four = append(four, a)
	}
	fifth := access(ns, ac.Name, readWrite, c)
	fw.Create(t, fifth)
	refused := func() error {
		if err := fw.Env.Client.Get(t.Context(), client.ObjectKeyFromObject(fifth), fifth); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(fifth.Status.Conditions, cosiapi.ConditionProvisioned)
		if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "at most 4 accesses") {
			return fmt.Errorf("the fifth access's conditions: %+v", fifth.Status.Conditions)
		}
		return nil
	}
	testenv.Eventually(t, refused)
	fw.Delete(t, four[0])
	fw.Waits.Gone(t, four[0])
	testenv.Never(t, 5*time.Second, refused)
	if err := put(t, tokenClient(t, secret(t, four[1])), "second"); err != nil {
		t.Errorf("put with another access's token: %v", err)
	}
	for _, a := range four[1:] {
		fw.Delete(t, a)
	}
	fw.Delete(t, c)
	fw.Waits.Gone(t, c)
}

// noSignatureInLogs checks that the token's signature is in no log of the COSI processes (the
// driver runs at verbosity 5, which logs requests and responses with secrets stripped).
func noSignatureInLogs(t *testing.T, s *corev1.Secret) {
	t.Helper()
	u, err := url.Parse(string(s.Data[cosiapi.SecretKeyAzureSASToken]))
	sig := u.Query().Get("sig")
	if err != nil || sig == "" {
		t.Fatalf("the token has no signature: %v", err)
	}
	framework.NotInLogs(t, []*localenv.Component{fw.Env.Driver, fw.Env.Sidecar, fw.Env.Controller},
		sig, url.QueryEscape(sig))
}

// A token with sasExpiry is renewed by the sidecar before it expires, with nothing asking for it:
// the Secret gets a new token bound to a new stored access policy, which Azurite accepts after the
// expiry the Secret first said; the first token is refused then, and stays refused after the next
// renewal (its policy is never extended).
func TestExpiryRenewed(t *testing.T) {
	requireAzurite(t)
	ns := fw.Namespace(t)
	class := fw.BucketClass(cosiapi.DeletionPolicyDelete, map[string]string{azure.ParamPurgeOnDelete: "true"})
	ac := accessClass(map[string]string{azure.ParamSASExpiry: "15s"})
	c := claim(ns, class.Name)
	fw.Create(t, class, ac, c)
	fw.Provisioned(t, c)
	a := access(ns, ac.Name, readWrite, c)
	fw.Create(t, a)
	fw.Provisioned(t, a)
	s := secret(t, a)
	old := tokenClient(t, s)
	token := string(s.Data[cosiapi.SecretKeyAzureSASToken])
	first, err := time.Parse(time.RFC3339, string(s.Data[cosiapi.SecretKeyAzureSASTokenExpiry]))
	if err != nil {
		t.Fatalf("%s: %v", cosiapi.SecretKeyAzureSASTokenExpiry, err)
	}
	renewedAfter := func(after time.Time) time.Time {
		var got time.Time
		testenv.Eventually(t, func() error {
			s := secret(t, a)
			got, err = time.Parse(time.RFC3339, string(s.Data[cosiapi.SecretKeyAzureSASTokenExpiry]))
			if err != nil {
				return fmt.Errorf("%s: %w", cosiapi.SecretKeyAzureSASTokenExpiry, err)
			}
			if !got.After(after) {
				return fmt.Errorf("the Secret's token expires at %s, not renewed", got)
			}
			if string(s.Data[cosiapi.SecretKeyAzureSASToken]) == token {
				return errors.New("the renewal kept the token: its expiry would have moved")
			}
			return nil
		})
		return got
	}
	second := renewedAfter(first)
	for time.Now().Before(first.Add(2 * time.Second)) {
		time.Sleep(500 * time.Millisecond)
	}
	if err := put(t, tokenClient(t, secret(t, a)), "after-expiry"); err != nil {
		t.Errorf("put with the renewed token past the first one's expiry: %v", err)
	}
	if err := put(t, old, "old"); err == nil {
		t.Error("the first token works past its expiry")
	}
	renewedAfter(second)
	if err := put(t, old, "old"); err == nil {
		t.Error("the first token works again after the next renewal")
	}
	fw.Delete(t, a)
	fw.Waits.Gone(t, a)
	fw.Delete(t, c)
	fw.Waits.Gone(t, c)
}
