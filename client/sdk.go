package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Middleware IDs added by StackFencing.
const (
	TokenMiddlewareID   = "fenceproxy.FencingToken"
	RefusalMiddlewareID = "fenceproxy.FencingRefusal"
)

// S3Fencing is an s3.Options function (s3.New(opts, client.S3Fencing(f)) or
// per call) that sends every call's fencing token in X-Fencing-Token: see
// StackFencing with DefaultHeader. Pass ContextToken as token to take the
// token from WithToken.
func S3Fencing(token func(context.Context) (uint64, error)) func(*s3.Options) {
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, StackFencing(DefaultHeader, token))
	}
}

// StackFencing is an APIOptions entry for any aws-sdk-go-v2 (smithy-go)
// client. It adds two middlewares:
//
//   - in the Build step, one that sets header ("" = DefaultHeader) to the
//     token returned by token(ctx) (nil = ContextToken), and
//     X-Fencing-Token-Signature to its signature when ctx carries one for
//     that token (WithSignedToken, WithLease), and X-Fencing-Prefix to the
//     prefix of WithPrefix. Build runs before Finalize,
//     where the SDK signs, so SigV4 covers both. ErrNoToken sends the call
//     without them; another error fails the call unsent.
//   - innermost in the Deserialize step, one that reads the problem body of a
//     refusal made by the proxy (CheckResponse) before the SDK's deserializer
//     sees it, and fails the call with that *StaleError or *RefusedError. The
//     SDK still wraps it in its *awshttp.ResponseError (status and headers),
//     so errors.As finds both, and AsStale finds the full StaleError. Both
//     are smithy.APIErrors whose ErrorCode is the proxy's S3 code
//     (StaleFencingToken, MissingFencingToken, ...), as the SDK reads it
//     without this middleware.
func StackFencing(header string, token func(context.Context) (uint64, error)) func(*middleware.Stack) error {
	if header == "" {
		header = DefaultHeader
	}
	if token == nil {
		token = ContextToken
	}
	build := middleware.BuildMiddlewareFunc(TokenMiddlewareID,
		func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
			tok, err := token(ctx)
			if errors.Is(err, ErrNoToken) {
				return next.HandleBuild(ctx, in)
			}
			var s string
			if err == nil {
				s, err = formatToken(tok)
			}
			if err != nil {
				return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("fenceproxy: fencing token: %w", err)
			}
			req, ok := in.Request.(*smithyhttp.Request)
			if !ok {
				return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("fenceproxy: unexpected transport request type %T", in.Request)
			}
			req.Header.Set(header, s)
			if sig, ok := SignatureFromContext(ctx, tok); ok {
				req.Header.Set(HeaderSignature, sig)
			}
			if p := PrefixFromContext(ctx); p != "" {
				req.Header.Set(HeaderPrefix, p)
			}
			return next.HandleBuild(ctx, in)
		})
	deserialize := middleware.DeserializeMiddlewareFunc(RefusalMiddlewareID,
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleDeserialize(ctx, in)
			if err != nil {
				return out, md, err
			}
			if resp, ok := out.RawResponse.(*smithyhttp.Response); ok && resp.Response != nil {
				if rerr := CheckResponse(resp.Response); rerr != nil {
					return out, md, rerr
				}
			}
			return out, md, nil
		})
	return func(stack *middleware.Stack) error {
		if err := stack.Build.Add(build, middleware.After); err != nil {
			return err
		}
		return stack.Deserialize.Add(deserialize, middleware.After)
	}
}
