package sdk_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/sdk"
)

func TestMethodDescValidateNamesWhatIsMissing(t *testing.T) {
	newMsg := func() proto.Message { return new(wrapperspb.StringValue) }
	invoke := func(any, context.Context, proto.Message) (proto.Message, error) { return nil, nil }
	complete := sdk.MethodDesc{Name: "M", NewRequest: newMsg, NewReply: newMsg, Invoke: invoke}
	require.NoError(t, complete.Validate())
	oneWay := sdk.MethodDesc{Name: "M", OneWay: true, NewRequest: newMsg, Invoke: invoke}
	require.NoError(t, oneWay.Validate(), "a one-way method needs no NewReply")

	empty := sdk.MethodDesc{}
	assert.EqualError(t, empty.Validate(), `method "" lacks a name of valid UTF-8, Invoke, NewRequest, NewReply (it is not one-way)`)
	typedNil := complete
	typedNil.NewReply = func() proto.Message { return (*wrapperspb.StringValue)(nil) }
	assert.EqualError(t, typedNil.Validate(), `method "M": NewReply returned no message`)
	panics := complete
	panics.NewRequest = func() proto.Message { panic("not yet") }
	assert.EqualError(t, panics.Validate(), `method "M": NewRequest panicked: not yet`)

	assert.EqualError(t, sdk.ValidateMethods([]sdk.MethodDesc{complete, oneWay}), `method "M" appears twice`)
}
