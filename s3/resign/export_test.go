package resign

import (
	"context"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// OwnSigner is the package's SigV4 signer, for the tests.
type OwnSigner struct{ s v4Signer }

// Sign signs r as SDKSign does.
func (o *OwnSigner) Sign(r *http.Request, creds aws.Credentials, payloadHash, service, region string, t time.Time) error {
	return o.s.sign(r, creds, payloadHash, service, region, t)
}

// SDKSign signs r with a new aws-sdk-go-v2 v4 signer as Rewrite did before
// its own (DisableURIPathEscaping): the reference. A new one each time: its
// key cache goes by access key id and day, not by secret.
func SDKSign(r *http.Request, creds aws.Credentials, payloadHash, service, region string, t time.Time) error {
	return sdkSigner().SignHTTP(context.Background(), creds, r, payloadHash, service, region, t)
}

// SDKSigner returns SDKSign with one signer (and its key cache) for every
// call.
func SDKSigner() func(r *http.Request, creds aws.Credentials, payloadHash, service, region string, t time.Time) error {
	sdk := sdkSigner()
	return func(r *http.Request, creds aws.Credentials, payloadHash, service, region string, t time.Time) error {
		return sdk.SignHTTP(context.Background(), creds, r, payloadHash, service, region, t)
	}
}

func sdkSigner() *v4.Signer {
	return v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
}

// UseSDKSigner makes s sign with aws-sdk-go-v2's signer (one for s).
func UseSDKSigner(s *Signer) {
	sdk := sdkSigner()
	s.signHTTP = func(ctx context.Context, creds aws.Credentials, r *http.Request, payloadHash, region string, t time.Time) error {
		return sdk.SignHTTP(ctx, creds, r, payloadHash, "s3", region, t)
	}
}
