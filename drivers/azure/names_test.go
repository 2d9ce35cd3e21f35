package azure

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

func TestContainerName(t *testing.T) {
	for _, tc := range []struct{ prefix, name, want string }{
		{"", "bc-1234", "bc-1234"},
		{"prod-", "bc-1234", "prod-bc-1234"},
		{"", "BC_1234", "bc-1234-"},
		{"", "a--b", "a-b-"},
		{"", "ab", "ab-"},
		{"", "---", "b-"},
		{"", strings.Repeat("x", 70), strings.Repeat("x", 54) + "-"},
	} {
		got := ContainerName(tc.prefix, tc.name)
		if !validContainerName(got) || !strings.HasPrefix(got, tc.want) {
			t.Errorf("ContainerName(%q, %q) = %q, want a valid name starting %q", tc.prefix, tc.name, got, tc.want)
		}
		if tc.want == tc.prefix+tc.name && got != tc.want {
			t.Errorf("ContainerName(%q, %q) = %q, want it unchanged", tc.prefix, tc.name, got)
		}
	}
	if ContainerName("", "a_b") == ContainerName("", "a.b") {
		t.Errorf("two names that map to the same text got the same container")
	}
	for _, bad := range []string{"ab", "-ab", "ab-", "a--b", "Ab1", "a_b", "$root", strings.Repeat("a", 64)} {
		if validContainerName(bad) {
			t.Errorf("validContainerName(%q) = true", bad)
		}
	}
}

// TestPermissions checks the access-mode table of docs/drivers/azure.md: the SAS permissions of
// each mode, and the combinations refused because one Azure permission would grant what another
// mode denies.
func TestPermissions(t *testing.T) {
	const (
		rw, ro, wo = cosiproto.AccessMode_READ_WRITE, cosiproto.AccessMode_READ_ONLY, cosiproto.AccessMode_WRITE_ONLY
		none       = cosiproto.AccessMode_UNSPECIFIED
	)
	for _, tc := range []struct {
		od, om, bm cosiproto.AccessMode_Mode
		want       string // "" means InvalidArgument
	}{
		{rw, none, none, "racwdl"},
		{ro, none, none, "rl"},
		{wo, none, none, "acwd"},
		{none, rw, none, "rwt"},
		{none, ro, none, "r"},
		{none, wo, none, "w"},
		{rw, rw, none, "racwdlt"},
		{ro, ro, none, "rl"},
		{wo, wo, none, "acwd"},
		{ro, wo, none, ""},
		{wo, ro, none, ""},
		{rw, ro, none, ""},
		{rw, wo, none, ""},
		{ro, rw, none, ""},
		{none, none, ro, ""},
		{rw, rw, rw, ""},
		{none, none, none, ""},
	} {
		got, err := permissions("b", &cosiproto.AccessModes{ObjectData: tc.od, ObjectMetadata: tc.om, BucketMetadata: tc.bm})
		switch {
		case tc.want == "" && status.Code(err) != codes.InvalidArgument:
			t.Errorf("object data %v, object metadata %v, bucket metadata %v: %q, %v; want InvalidArgument",
				tc.od, tc.om, tc.bm, got, err)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("object data %v, object metadata %v, bucket metadata %v: %q, %v; want %q",
				tc.od, tc.om, tc.bm, got, err, tc.want)
		}
	}
}

// TestCredentialsFile checks that a rotated key in the credentials file is used without a restart,
// that a file naming another account is refused, and that errors name no value.
func TestCredentialsFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "account.env")
	write := func(account, key string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(EnvAccount+"="+account+"\n"+EnvKey+"="+key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("acct", "a2V5MQ==")
	c, err := LoadCredentials(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	sign := func() string {
		t.Helper()
		cred, err := c.current()
		if err != nil {
			t.Fatal(err)
		}
		q, err := sas.BlobSignatureValues{ContainerName: "c", Identifier: "i"}.SignWithSharedKey(cred)
		if err != nil {
			t.Fatal(err)
		}
		return q.Signature()
	}
	before := sign()
	write("acct", "a2V5Mg==x") // mid-write: not base64
	c.checked = time.Time{}
	if _, err := c.current(); err == nil || strings.Contains(err.Error(), "a2V5Mg") {
		t.Errorf("a key that is not base64: %v, want an error without the value", err)
	}
	write("acct", "a2V5MjIyMg==") // another size: the change shows whatever the mtime granularity
	c.checked = time.Time{}
	if sign() == before {
		t.Errorf("the rotated key is not used")
	}
	write("other", "a2V5MjIyMjIyMjI=")
	c.checked = time.Time{}
	if _, err := c.current(); err == nil || !strings.Contains(err.Error(), "another storage account") {
		t.Errorf("a file naming another account: %v", err)
	}
	if _, err := LoadCredentials("", func(string) string { return "" }); err == nil ||
		!strings.Contains(err.Error(), EnvAccount) {
		t.Errorf("no credentials in the environment: %v, want an error naming %s", err, EnvAccount)
	}
}
