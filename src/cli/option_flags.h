#pragma once
// Library errors name the option field they are about ("TrainOptions::
// batch_size must be positive"), as library users set fields, not flags. The
// CLI tells its users the flag instead: each subcommand maps the fields it
// sets to its flags here and rewrites the messages it reports.

#include <string>
#include <utility>
#include <vector>

namespace dtrain::cli {

/// (field as the library spells it, flag) pairs.
using FieldFlags = std::vector<std::pair<std::string, std::string>>;

/// `message` with every field of `fields` replaced by its flag (the longest
/// field first, so "TrainOptions::lr_warmup_steps" is not taken for a field
/// it starts with). Text naming no field is returned unchanged.
std::string name_flags(std::string message, const FieldFlags& fields);

/// The TrainOptions (and its LrSchedule and OptimizerOptions) fields that
/// `dtrain train` and `dtrain bench train` set, with their flags.
const FieldFlags& train_field_flags();

/// The EvalOptions fields `dtrain eval` sets, with their flags.
const FieldFlags& eval_field_flags();

/// The fields named by the errors of `dtrain bench ddp`, `collective` and
/// `scaling` (the comm hook's options), with their flags.
const FieldFlags& bench_field_flags();

/// The KVStoreOptions fields `dtrain ps scheduler|server` sets, with their
/// flags.
const FieldFlags& ps_field_flags();

/// The parameters of the preparation functions (dtrain/image.h) named by
/// their errors, with `dtrain data`'s flags.
const FieldFlags& data_field_flags();

/// The LaunchOptions fields `dtrain run` sets, with their flags: what
/// launch() throws (its rendezvous's errors included) and the failure lines
/// of its summary are reported with these.
const FieldFlags& launch_field_flags();

}  // namespace dtrain::cli
