// Listings made once per job (data/image/shared_listing.h).
//
// Note [Shared listing]
// Listing ImageNet's training split in S3 is 1,282 ListObjectsV2 pages of
// 1,000 keys; a job of 1,000 ranks that each list it sends 1.28 million
// requests before its first step, and pays the request charges, for one
// answer. So when datasets open with a process group of more than one rank
// (open_dataset(options, pg)), the registry gives every split of that call
// one Storage shared with the group (Storage::share_with), and what opening
// asks S3 goes through share_from_rank0: rank 0 asks, every other rank waits
// in a broadcast and gets rank 0's answer:
//   - Storage::list of an s3:// folder (ImageFolder's scan, a WebDataset
//     directory's shards): names, sizes and ETags, about 30 bytes an object
//     in encode_listing's form (37 MB for ImageNet's 1.28 million names);
//   - Storage::is_directory of an s3:// location (the registry's probes of
//     DATA_DIR, train, val): one byte;
//   - a WebDataset shard in S3: its size, ETag and sample index
//     (Note [WebDataset order]), so the other ranks neither HEAD nor read it.
// Every rank makes the same calls in the same order, because each call's
// result is rank 0's on every rank, so every rank takes the same branches;
// each message starts with what it answers ("list s3://b/imagenet/train"),
// and a rank that asked something else (a different --data-dir) fails
// naming both instead of reading a wrong answer. A failure on rank 0 (no
// such bucket, access denied, an empty folder) is sent as a status and its
// one-line message, so every rank throws the same error at once instead of
// the others waiting out the group's timeout. (A failure on another rank
// alone -- its own data cache directory, its own GET of a packed index.bin --
// is not shared: that rank throws, and the others see PeerLostError when its
// process exits, or wait out the timeout while it lives; making every step
// of opening collective would cost an allreduce per step.) The ranks get the same
// listing, so the same samples in the same order and the same data
// fingerprint (Note [Dataset fingerprints]) as if each had listed alone.
// The other ranks wait for rank 0's listing as long as the group's timeout
// (30 minutes by default); 1.28 million keys take about a minute from S3.
//
// Local folders are still listed by each rank: a local path may be a
// different disk on each node, and a rank must find its own files missing
// at open rather than at its first read. Packed datasets read one index.bin
// per rank (one GET each) and HEAD their shards, as before. Opening without
// a group (open_dataset(options), or a group of one rank) lists as before.

#include "data/image/shared_listing.h"

#include <ATen/ATen.h>

#include <cstring>

#include "common/strings.h"
#include "dtrain/comm.h"
#include "dtrain/errors.h"

namespace dtrain::image {
namespace {

constexpr uint64_t kOk = 0, kInvalidArgument = 1, kOtherError = 2;

// The message every rank throws for rank 0's failure.
std::string failure_line(const std::string& message, const ProcessGroup& pg) {
  return cat(first_line(message), " (rank 0 of ", pg.size(),
             " opens S3 datasets for every rank: Note [Shared listing])");
}

// `bytes` of rank 0 on every rank: its length, then a uint8 tensor.
std::string broadcast_from_rank0(const ProcessGroup& pg, std::string bytes) {
  const bool root = pg.rank() == 0;
  std::vector<at::Tensor> length{
      at::full({1}, root ? static_cast<int64_t>(bytes.size()) : int64_t{0}, at::kLong)};
  pg.broadcast(length);
  const int64_t n = length[0].item<int64_t>();
  if (n == 0) return root ? std::move(bytes) : std::string();
  std::vector<at::Tensor> data{root ? at::from_blob(bytes.data(), {n}, at::kByte)
                                    : at::empty({n}, at::kByte)};
  pg.broadcast(data);
  if (root) return bytes;
  const at::Tensor got = data[0].contiguous();
  return std::string(reinterpret_cast<const char*>(got.data_ptr<uint8_t>()),
                     static_cast<size_t>(n));
}

}  // namespace

std::string share_from_rank0(const ProcessGroup& pg, const std::string& what,
                             const std::function<std::string()>& produce) {
  if (pg.size() == 1) return produce();
  std::string message;
  if (pg.rank() == 0) {
    uint64_t status = kOk;
    std::string payload;
    try {
      payload = produce();
    } catch (const InvalidArgument& e) {
      status = kInvalidArgument;
      payload = e.what();
    } catch (const std::exception& e) {
      status = kOtherError;
      payload = e.what();
    }
    WireWriter w;
    w.bytes(what);
    w.u64(status);
    w.str().append(payload);
    message = std::move(w.str());
  }
  message = broadcast_from_rank0(pg, std::move(message));
  WireReader r(message, cat("rank ", pg.rank(), ": the answer rank 0 sent for '", what, "'"));
  const std::string_view asked = r.bytes();
  const uint64_t status = r.u64();
  if (asked != what) {
    throw DataError(cat("rank ", pg.rank(), " opens '", what, "' but rank 0 opened '", asked,
                        "': every rank must open the same datasets in the same order (give "
                        "every rank the same --dataset and --data-dir)"));
  }
  std::string payload(r.rest());
  if (status == kInvalidArgument) throw InvalidArgument(failure_line(payload, pg));
  if (status != kOk) throw DataError(failure_line(payload, pg));
  return payload;
}

void Storage::share_with(const ProcessGroup* group) {
  Exchange e;
  if (group && group->size() > 1) {
    e = [group](const std::string& what, const std::function<std::string()>& produce) {
      return share_from_rank0(*group, what, produce);
    };
  }
  std::lock_guard<std::mutex> lock(mu_);
  exchange_ = std::move(e);
}

}  // namespace dtrain::image
