package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/s3/gateway"
	"github.com/fenceproxy/fenceproxy/s3/keyring"
	"github.com/fenceproxy/fenceproxy/s3/resign"
	"github.com/fenceproxy/fenceproxy/wire"
)

// newGateway builds S3 gateway mode (FENCEPROXY_S3=resign): the workers'
// keys, re-read until ctx ends; the store's credentials from the AWS default
// chain, retrieved once now so that a missing one fails the start; and the
// signer for the store at FENCEPROXY_UPSTREAM.
func newGateway(ctx context.Context, cfg config.Config, log *slog.Logger) (*gateway.Gateway, error) {
	keys, err := keyring.Watch(ctx, cfg.S3CredentialsFile, 0, log)
	if err != nil {
		return nil, fmt.Errorf("FENCEPROXY_S3_CREDENTIALS_FILE: %w", err)
	}
	creds, err := resign.DefaultCredentials(ctx, cfg.S3Region)
	if err != nil {
		return nil, err
	}
	c, err := creds.Retrieve(ctx)
	if err != nil {
		return nil, fmt.Errorf("S3 gateway mode: the store's credentials (the AWS default chain: AWS_ACCESS_KEY_ID, AWS_PROFILE, web identity, pod identity, instance metadata): %w", err)
	}
	if cfg.Upstream.Scheme != "https" {
		log.Warn("S3 gateway mode over plain HTTP: the store's signatures and the bodies cross the network unencrypted", "upstream", cfg.Upstream.Redacted())
	}
	token := strings.ToLower(cfg.TokenHeader)
	signature := strings.ToLower(wire.HeaderSignature)
	signer := &resign.Signer{Endpoint: cfg.Upstream, Region: cfg.S3Region, VirtualHosted: cfg.S3StoreStyle == "virtual",
		Credentials: creds, Dropped: func(name string) bool { return name == token || name == signature }}
	log.Info("S3 gateway mode", "store_key", c.AccessKeyID, "store_credentials_source", c.Source, "region", cfg.S3Region,
		"store_style", cfg.S3StoreStyle, "worker_keys", keys.Keys().Len(), "token_metadata", cfg.S3TokenMetadata)
	return gateway.New(gateway.Options{Keys: keys, Region: cfg.S3Region, Signer: signer, TokenMetadata: cfg.S3TokenMetadata})
}
