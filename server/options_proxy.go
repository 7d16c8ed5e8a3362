package server

import (
	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/proxy"
)

// proxyOptionsFrom returns the proxy options that cfg sets: its Settings,
// field for field; the rest (MultipartRecords, Gateway, UpstreamCAs, Logger,
// Metrics, Authenticate, Transport, Owner) stay nil.
func proxyOptionsFrom(cfg config.Config) proxy.Options {
	return proxy.Options{Settings: proxy.Settings{
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
		UploadMinRate:     int64(cfg.UploadMinRate),
		UploadRateWindow:  cfg.UploadRateWindow,
		MaxUploads:        cfg.MaxUploads,
		AccessLog:         cfg.AccessLog,
	}}
}
