package rt

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
)

// H1: each helper that makes a status its receiver's own copies every slice, map and pointer
// of the status, however deep, and keeps every value. The types are walked, so a field added
// to a status later that its helper does not copy fails this test.
func TestH1_AStatusHandedOutSharesNoMemory(t *testing.T) {
	t.Run("RuntimeStatus", func(t *testing.T) { assertOwnCopy(t, ownRuntimeStatus) })
	t.Run("HostCapacityStatus", func(t *testing.T) { assertOwnCopy(t, ownCapacityStatus) })
	t.Run("RouteMeshStatus", func(t *testing.T) { assertOwnCopy(t, ownMeshStatus) })
	t.Run("ClientServerStatus", func(t *testing.T) { assertOwnCopy(t, ownClientServerStatus) })
	t.Run("FanoutStatus", func(t *testing.T) { assertOwnCopy(t, ownFanoutStatus) })
}

// assertOwnCopy checks that own, given a status whose every field is set, returns an equal
// status with no slice, map or pointer in common with it.
func assertOwnCopy[T any](t *testing.T, own func(T) T) {
	t.Helper()
	var st T
	fill(reflect.ValueOf(&st).Elem())
	got := own(st)
	assert.Equal(t, st, got, "the copy keeps every value")
	assert.Empty(t, shared(reflect.ValueOf(st), reflect.ValueOf(got), reflect.TypeFor[T]().Name()), "the copy shares memory with the status")
}

// fill sets every exported field of v, however deep, to a value that is not zero: a pointer
// to a filled value, a slice or map of one filled element.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(k, e)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				fill(f)
			}
		}
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.String:
		v.SetString("x")
	}
}

// shared lists the paths at which a and b, values of one type, hold the same slice, map or
// pointer. Unexported fields are the standard library's (time.Time's location) and skipped.
func shared(a, b reflect.Value, path string) []string {
	var out []string
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			return []string{path}
		}
		return shared(a.Elem(), b.Elem(), "*"+path)
	case reflect.Slice:
		if a.Len() > 0 && b.Len() > 0 && a.Pointer() == b.Pointer() {
			out = append(out, path)
		}
		for i := range min(a.Len(), b.Len()) {
			out = append(out, shared(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i))...)
		}
	case reflect.Map:
		if a.IsNil() || b.IsNil() {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			return []string{path}
		}
		for _, k := range a.MapKeys() {
			if e := b.MapIndex(k); e.IsValid() {
				out = append(out, shared(a.MapIndex(k), e, fmt.Sprintf("%s[%v]", path, k))...)
			}
		}
	case reflect.Struct:
		for i := range a.NumField() {
			if f := a.Type().Field(i); f.IsExported() {
				out = append(out, shared(a.Field(i), b.Field(i), path+"."+f.Name)...)
			}
		}
	}
	return out
}
