package azurite_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"

	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/store/azurite"
)

// start starts an emulator in dir, or skips the test when Azurite is not installed.
func start(t *testing.T, dir string) *azurite.Emulator {
	t.Helper()
	root, err := localenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := azurite.Binary(root + "/bin")
	if err := azurite.Installed(bin); err != nil {
		t.Skipf("Azurite is not installed on this machine: %v", err)
	}
	e, err := azurite.Start(t.Context(), azurite.Options{Binary: bin, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Error(err)
		}
	})
	return e
}

func client(t *testing.T, e *azurite.Emulator, key string) *service.Client {
	t.Helper()
	cred, err := azblob.NewSharedKeyCredential(e.Account, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := service.NewClientWithSharedKeyCredential(e.Endpoint+"/", cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEmulator checks what the Azure driver's tests rely on: the emulator serves its account with
// the key it reports and refuses another key (it checks Shared Key signatures), and a restart on
// the same directory keeps the account's key and its data.
func TestEmulator(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	e := start(t, dir)
	c := client(t, e, e.Key)
	if _, err := c.NewContainerClient("kept").Create(ctx, nil); err != nil {
		t.Fatalf("creating a container with the account's key: %v", err)
	}
	if _, err := c.NewContainerClient("kept").
		NewBlockBlobClient("blob").
		UploadBuffer(ctx, []byte("data"), nil); err != nil {
		t.Fatalf("uploading a blob with the account's key: %v", err)
	}
	other := make([]byte, 64)
	_, _ = rand.Read(other)
	_, err := client(t, e, base64.StdEncoding.EncodeToString(other)).NewContainerClient("other").Create(ctx, nil)
	if status(err) != http.StatusForbidden {
		t.Errorf("creating a container with another key: %v, want HTTP 403", err)
	}

	key := e.Key
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	e = start(t, dir)
	if e.Key != key {
		t.Errorf("the key changed across a restart on the same directory")
	}
	resp, err := client(t, e, e.Key).NewContainerClient("kept").NewBlobClient("blob").DownloadStream(ctx, nil)
	if err != nil {
		t.Fatalf("reading the blob after a restart: %v", err)
	}
	defer resp.Body.Close()
	if data, _ := io.ReadAll(resp.Body); !bytes.Equal(data, []byte("data")) {
		t.Errorf("the blob holds %q after a restart, want %q", data, "data")
	}
}

// TestStartWithoutAzurite names the make target that installs Azurite.
func TestStartWithoutAzurite(t *testing.T) {
	_, err := azurite.Start(context.Background(), azurite.Options{Binary: t.TempDir() + "/none", Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "make azurite") {
		t.Errorf("Start without the binary: %v, want an error naming make azurite", err)
	}
}

func status(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}
