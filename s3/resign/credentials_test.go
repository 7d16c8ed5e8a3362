package resign_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fenceproxy/fenceproxy/s3/resign"
)

// TestDefaultCredentials: the chain finds the store's key in the
// environment first, else in a shared credentials file (AWS_PROFILE), and
// Retrieve fails when there is none anywhere.
func TestDefaultCredentials(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(home, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(home, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true") // no instance metadata lookups from a test
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	get := func() (string, error) {
		t.Helper()
		p, err := resign.DefaultCredentials(t.Context(), "us-east-1")
		if err != nil {
			t.Fatal(err)
		}
		c, err := p.Retrieve(t.Context())
		return c.AccessKeyID, err
	}
	if id, err := get(); err == nil {
		t.Errorf("no credentials anywhere: Retrieve gave %q, want an error", id)
	}
	if err := os.WriteFile(filepath.Join(home, "credentials"), []byte("[store]\naws_access_key_id = FROMFILE\naws_secret_access_key = secret-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_PROFILE", "store")
	if id, err := get(); err != nil || id != "FROMFILE" {
		t.Errorf("shared file: %q, %v; want FROMFILE", id, err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "FROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-from-env")
	if id, err := get(); err != nil || id != "FROMENV" {
		t.Errorf("environment: %q, %v; want FROMENV", id, err)
	}
}
