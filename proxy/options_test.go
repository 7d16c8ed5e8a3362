package proxy

import "github.com/fenceproxy/fenceproxy/config"

// DefaultOptions returns, for the tests, the options that config.Default
// sets, mapped as the server maps a configuration.
func DefaultOptions() Options {
	cfg := config.Default()
	return Options{Settings: Settings{
		Upstream:          cfg.Upstream,
		TokenHeader:       cfg.TokenHeader,
		UnfencedMethods:   cfg.UnfencedMethods,
		ResourceDepth:     cfg.ResourceDepth,
		AllowPathParams:   cfg.AllowPathParams,
		S3:                cfg.S3,
		S3Domains:         cfg.S3Domains,
		S3VirtualHosted:   cfg.S3VirtualHosted,
		S3BucketWrites:    cfg.S3BucketWrites,
		S3UploadRecordTTL: cfg.S3UploadRecordTTL,
		RequireToken:      cfg.RequireToken,
		Mode:              cfg.Mode,
		DialTimeout:       cfg.UpstreamDialTimeout,
		ResponseTimeout:   cfg.UpstreamResponseTimeout,
		UploadIdleTimeout: cfg.UploadIdleTimeout,
		UpstreamFastPath:  cfg.UpstreamFastPath,
		UpstreamUnsentMax: int(cfg.UpstreamUnsentMax),
		AccessLog:         cfg.AccessLog,
	}}
}
