package plugins

import (
	"reflect"
	"testing"

	"github.com/gorun/gorun/plugins/internal/wire"
	"github.com/gorun/gorun/plugins/sdk"
)

// The plugin API's structs exist once for each side of the wire: the
// host's (this package's, which users and gorun's commands see), the
// wire's, and the SDK's (which plugin authors see). Go converts between
// them, which holds their fields' names and types equal; this holds
// their JSON names (gorun plugins --json, the wire) and their order
// equal too, so that a field added, renamed or retagged on one side only
// fails here.
func TestPluginAPIStructsEqual(t *testing.T) {
	families := [][]any{
		{Info{}, wire.InfoReply{}},
		{Device{}, wire.Device{}, sdk.Device{}},
		{wire.CollOp{}, sdk.Op{}}, // plugins.Op is wire.CollOp
	}
	for _, family := range families {
		want := reflect.TypeOf(family[0])
		for _, v := range family[1:] {
			got := reflect.TypeOf(v)
			if got.NumField() != want.NumField() {
				t.Errorf("%v has %d fields, %v %d", got, got.NumField(), want, want.NumField())
				continue
			}
			for i := range want.NumField() {
				w, g := want.Field(i), got.Field(i)
				if g.Name != w.Name || g.Type != w.Type || g.Tag.Get("json") != w.Tag.Get("json") {
					t.Errorf("%v.%s %v `json:%q` differs from %v.%s %v `json:%q`",
						got, g.Name, g.Type, g.Tag.Get("json"), want, w.Name, w.Type, w.Tag.Get("json"))
				}
			}
		}
	}
}
