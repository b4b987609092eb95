#pragma once
// Chainable setters for dtrain's options structs.
//
// Note [Chainable options]
// LibTorch's options (TORCH_ARG) keep each field private behind a getter
// `x()` and a chainable setter `x(v)`, so `LinearOptions(5, 2).bias(false)`
// reads as one expression. C++ does not let a data member and a member
// function share a name, so that spelling would turn every `o.x = v` and
// `o.x` in dtrain, its tests and its users' programs into `o.x(v)` and
// `o.x()`. dtrain's options stay plain structs with public, documented
// fields (as LevelDB's are: aggregate initialisation and `o.x = v` keep
// working), and each field `x` also has a chainable setter `set_x(v)`
// returning the struct:
//
//   dtrain::DdpOptions().set_bucket_cap_mb(50).set_find_unused_parameters(true)
//
// The setters are declared after the fields with DTRAIN_SETTER, whose type
// is the field's own (decltype), so a setter cannot disagree with its field.
// A field added without a setter still compiles: add its DTRAIN_SETTER line
// with it (tests/api/test_options.cpp checks the setters of the most used
// structs).

#include <utility>

/// Declares `Self& set_<field>(value)`: assigns the field and returns *this,
/// for chaining. Use inside the struct, after the field.
#define DTRAIN_SETTER(Self, field)           \
  Self& set_##field(decltype(field) value) { \
    field = std::move(value);                \
    return *this;                            \
  }
