#pragma once
// What a dataset's opening learns from S3 -- listings, directory probes,
// WebDataset shard indexes -- made once per job by rank 0 and sent to the
// other ranks over the process group (Note [Shared listing] in
// shared_listing.cpp); the encoding it travels in is listing_codec.h.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/image/listing_codec.h"
#include "data/image/location.h"

namespace dtrain {
class ProcessGroup;  // dtrain/comm.h
}

namespace dtrain::image {

/// Collective over `pg` (Note [Shared listing]): rank 0 calls `produce` and
/// every rank returns the bytes it returned. Every rank must call it in the
/// same order with the same `what` ("list s3://bucket/prefix"); a rank whose
/// `what` differs from rank 0's throws DataError naming both. When `produce`
/// throws on rank 0, every rank throws the same one-line error: rank 0's
/// message and the rank that made it (InvalidArgument stays one; any other
/// error becomes a DataError). Blocks up to the group's timeout for rank 0.
/// On a group of size 1, `produce()` itself, errors as it throws them.
std::string share_from_rank0(const ProcessGroup& pg, const std::string& what,
                             const std::function<std::string()>& produce);

}  // namespace dtrain::image
