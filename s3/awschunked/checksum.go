package awschunked

import (
	"crypto/sha1"
	"crypto/sha256"
	"hash"
	"hash/crc32"
	"hash/crc64"
)

// crc64NVME is the CRC-64/NVME table: polynomial 0xad93d23594c93659, in the
// reversed form hash/crc64 takes.
var crc64NVME = crc64.MakeTable(0x9a6c9329ac4bc9b5)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksums are the checksum trailers S3 defines, by trailer name; the
// trailer's value is the base64 of the digest.
var checksums = map[string]func() hash.Hash{
	"x-amz-checksum-crc32":     func() hash.Hash { return crc32.NewIEEE() },
	"x-amz-checksum-crc32c":    func() hash.Hash { return crc32.New(castagnoli) },
	"x-amz-checksum-crc64nvme": func() hash.Hash { return crc64.New(crc64NVME) },
	"x-amz-checksum-sha1":      sha1.New,
	"x-amz-checksum-sha256":    sha256.New,
}
