// The reducer's bucket timings into a timeline.
#include "dtrain/ddp.h"
#include "dtrain/timeline.h"

namespace dtrain {

std::function<void(const BucketTiming&)> timeline_bucket_observer(Timeline* timeline,
                                                                  const std::string& operation) {
  if (timeline == nullptr) return {};
  return [timeline, operation](const BucketTiming& b) {
    timeline->bucket(b.index, b.bytes, b.launched, b.completed, operation);
  };
}

}  // namespace dtrain
