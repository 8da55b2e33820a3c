package plugins

import (
	"encoding/json"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
)

// CodecName is the gRPC content subtype of gorun's plugin services: their
// messages are Go structs encoded as JSON, so no protobuf compiler is needed
// to write a service or a plugin. go-plugin's own services keep protobuf.
const CodecName = "gorunjson"

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return CodecName }

func init() { encoding.RegisterCodec(jsonCodec{}) }

// CallOption makes a gRPC call use gorun's JSON codec. Every client call of
// a gorun plugin service passes it.
func CallOption() grpc.CallOption { return grpc.CallContentSubtype(CodecName) }
