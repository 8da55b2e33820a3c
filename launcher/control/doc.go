// Package control is gorun's control protocol between the head and its
// agents: framed, versioned messages over one byte stream in each
// direction (the agent's stdin and stdout, whether that is a local pipe or
// an SSH session's channel).
//
// # Wire format
//
// The agent first writes [Preamble], so that the head can skip anything a
// remote login shell printed before the agent started and report it. After
// that, both directions carry frames:
//
//	uint32 length (big endian) of what follows: type byte + payload
//	uint8  type (a [Type])
//	payload
//
// Control messages carry JSON payloads (see the message types in this
// package); the bulk messages [TypeOutput] and [TypeStdin] carry a small
// binary header and raw bytes, so output of any size and content passes
// unchanged. The first frame in each direction is a [Hello]; a peer whose
// [Hello.Proto] differs from [Version] is refused.
//
// The package does not decide what the messages mean: package launcher
// does. It only moves them, bounded ([MaxFrame]) and checked, and reads
// no more than it must: the preamble line at most [MaxPreambleLine] bytes,
// and a frame's payload into a buffer that grows as the bytes arrive, not
// as the length field promises.
package control
