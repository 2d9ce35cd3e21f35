package azureprobe

import (
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

// Against Azurite, TestAzureProbe and TestSanity (drivers/azure) check the probe. Here: what needs
// no account.

func TestNewRefusesIncompleteConfig(t *testing.T) {
	cred, err := azblob.NewSharedKeyCredential("account", "a2V5")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Credential: cred}, "Config.Endpoint is required"},
		{Config{Endpoint: "127.0.0.1:10000/account", Credential: cred}, "not an http:// or https:// URL"},
		{Config{Endpoint: "http://127.0.0.1:10000/account"}, "Config.Credential"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := New(Config{Endpoint: "https://account.blob.core.windows.net", Credential: cred}); err != nil {
		t.Errorf("New with endpoint and credential: %v", err)
	}
}

// A token is the container's URL with the SAS as its query, on Azure and path-style on an
// emulator; errors never repeat it.
func TestParseToken(t *testing.T) {
	for _, tc := range []struct {
		token, base, query, err string
	}{
		{"https://acct.blob.core.windows.net/bucket?sv=1&si=ba-1&sr=c&sig=abc",
			"https://acct.blob.core.windows.net", "sv=1&si=ba-1&sr=c&sig=abc", ""},
		{"http://127.0.0.1:10000/acct/bucket?sig=abc&sr=c", "http://127.0.0.1:10000/acct", "sig=abc&sr=c", ""},
		{"sv=1&sr=c&sig=secretvalue", "", "", "not a URL"},
		{"https://acct.blob.core.windows.net/bucket?sv=1&sr=c", "", "", "no SAS signature"},
		{"https://acct.blob.core.windows.net/?sig=secretvalue", "", "", "names no container"},
		{"", "", "", "no Azure SAS token"},
	} {
		base, query, err := parseToken(tc.token)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseToken(%q): %v, want an error naming %q", tc.token, err, tc.err)
		case tc.err != "" && strings.Contains(err.Error(), "secretvalue"):
			t.Errorf("parseToken(%q): the error %q repeats the signature", tc.token, err)
		case tc.err == "" && (err != nil || base != tc.base || query != tc.query):
			t.Errorf("parseToken(%q) = %q, %q, %v; want %q, %q", tc.token, base, query, err, tc.base, tc.query)
		}
	}
}
