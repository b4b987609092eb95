// Listings shared from rank 0 (Note [Shared listing]): the encoding they
// travel in, and share_from_rank0 over ranks as threads of one process. The
// S3 side (one listing pass for a group) is in test_s3_data.cpp.

#include <gtest/gtest.h>

#include <cstdio>

#include "data/image/shared_listing.h"
#include "dtrain/comm.h"
#include "dtrain/errors.h"
#include "support/ranks.h"

namespace dtrain::image {
namespace {

// ImageNet-like names with S3's three kinds of ETag: an MD5, a multipart
// upload's, none.
std::vector<Listed> imagenet_like(int classes, int per_class) {
  std::vector<Listed> out;
  for (int c = 0; c < classes; ++c) {
    for (int i = 0; i < per_class; ++i) {
      char name[64], etag[40];
      std::snprintf(name, sizeof name, "n%08d/n%08d_%d.JPEG", c, c, i);
      std::snprintf(etag, sizeof etag, "\"%08x%024x\"", c * 7919 + i, i);
      out.push_back({name, 100000 + c * per_class + i, etag});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Listed& a, const Listed& b) { return a.name < b.name; });
  out[1].etag = "\"9b2cf535f27731c974343645a3985328-12\"";
  out[2].etag = "";
  return out;
}

void expect_same(const std::vector<Listed>& a, const std::vector<Listed>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << i;
    EXPECT_EQ(a[i].size, b[i].size) << i;
    EXPECT_EQ(a[i].etag, b[i].etag) << i;
  }
}

TEST(SharedListing, AListingDecodesToItselfInUnder40BytesAnImageNetObject) {
  const std::vector<Listed> listing = imagenet_like(20, 50);
  const std::string bytes = encode_listing(listing);
  expect_same(decode_listing(bytes, "test"), listing);
  EXPECT_LT(bytes.size(), 40 * listing.size());
  expect_same(decode_listing(encode_listing({}), "test"), {});
}

TEST(SharedListing, ACutOrPaddedListingIsADataErrorNamingIt) {
  const std::string bytes = encode_listing(imagenet_like(2, 3));
  for (const std::string& bad : {bytes.substr(0, bytes.size() - 1), bytes + "x", std::string()}) {
    const std::string error =
        testing::error_of([&] { decode_listing(bad, "the listing of 's3://b/p'"); });
    EXPECT_NE(error.find("the listing of 's3://b/p' is malformed at byte"), std::string::npos)
        << error;
  }
  EXPECT_THROW(decode_listing(bytes.substr(0, 5), "x"), DataError);
}

TEST(SharedListing, EveryRankGetsRank0sBytesAndRank0AloneProduces) {
  for (int world : {1, 2, 3}) {
    std::vector<std::string> got(world);
    std::vector<int> produced(world, 0);
    const std::string big(3 << 20, 'x');  // several MB, as a large listing
    testing::run_ranks(world, [&](const ProcessGroup& pg) {
      for (const std::string& payload : {std::string(), std::string("ab"), big}) {
        got[pg.rank()] = share_from_rank0(pg, "list s3://b/p", [&] {
          ++produced[pg.rank()];
          return payload;
        });
        EXPECT_EQ(got[pg.rank()], payload) << "rank " << pg.rank();
      }
    });
    EXPECT_EQ(produced[0], 3);
    for (int r = 1; r < world; ++r) EXPECT_EQ(produced[r], 0) << "rank " << r;
  }
}

TEST(SharedListing, AFailureOnRank0IsTheSameErrorOnEveryRankKeepingInvalidArgument) {
  std::vector<std::string> errors(3);
  std::vector<int> invalid(3, 0);
  testing::run_ranks(3, [&](const ProcessGroup& pg) {
    try {
      share_from_rank0(pg, "list s3://b/p", []() -> std::string {
        throw InvalidArgument("bad location 's3://b/p'\nsecond line");
      });
    } catch (const InvalidArgument& e) {
      errors[pg.rank()] = e.what();
      invalid[pg.rank()] = 1;
    }
    // The group still works: nothing was left half sent.
    EXPECT_EQ(share_from_rank0(pg, "probe s3://b/q", [] { return std::string("1"); }), "1");
  });
  EXPECT_EQ(errors[0],
            "bad location 's3://b/p' (rank 0 of 3 opens S3 datasets for every rank: Note "
            "[Shared listing])");
  EXPECT_EQ(errors[1], errors[0]);
  EXPECT_EQ(errors[2], errors[0]);
  EXPECT_EQ(invalid, std::vector<int>(3, 1));
}

TEST(SharedListing, ARankAskingForAnotherFolderThanRank0FailsNamingBoth) {
  std::string error;
  testing::run_ranks(2, [&](const ProcessGroup& pg) {
    const std::string what = pg.rank() == 0 ? "list s3://b/train" : "list /local/train";
    const std::string e =
        testing::error_of([&] { share_from_rank0(pg, what, [] { return std::string("x"); }); });
    if (pg.rank() == 1) error = e;
  });
  EXPECT_NE(error.find("rank 1 opens 'list /local/train' but rank 0 opened 'list s3://b/train'"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace dtrain::image
