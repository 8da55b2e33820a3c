package plugins

import (
	"google.golang.org/grpc"

	"github.com/gorun/gorun/plugins/internal/wire"
)

// CodecName is the gRPC content subtype of gorun's plugin services: their
// messages are Go structs encoded as JSON, so no protobuf compiler is needed
// to write a service or a plugin. go-plugin's own services keep protobuf.
const CodecName = wire.CodecName

// CallOption makes a gRPC call use gorun's JSON codec. Every client call of
// a gorun plugin service passes it.
func CallOption() grpc.CallOption { return wire.CallOption() }
