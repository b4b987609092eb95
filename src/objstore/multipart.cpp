#include "common/printable.h"
#include "common/strings.h"
#include "objstore/s3_request.h"
#include "objstore/xml.h"

namespace dtrain::objstore {

// Note [Multipart uploads]
// CreateMultipartUpload, then UploadPart for each options.part_size slice
// (each with Content-MD5, so S3 rejects a part damaged in transit), then
// CompleteMultipartUpload listing the parts' ETags; If-None-Match: * goes on
// the Complete (where S3 evaluates it). Any failure aborts the upload, so
// no invisible parts are left behind to be billed. Parts go one after
// another: item 3 of issue 18 (parallel transfers) is where concurrency
// belongs.

namespace {

std::string upload_id_of(const S3Options& options, const S3Call& call,
                         const HttpResponse& response) {
  auto xml = parse_xml(response.body);
  std::string id =
      xml && xml->name == "InitiateMultipartUploadResult" ? xml->child_text("UploadId") : "";
  if (id.empty()) {
    throw ObjectStoreError(cat("S3 CreateMultipartUpload s3://", call.bucket, "/", call.key,
                               ": the answer from ", effective_endpoint(options),
                               " has no UploadId; fix: point AWS_ENDPOINT_URL_S3 at an S3 API"),
                           response.status, "", call.bucket, call.key);
  }
  return id;
}

}  // namespace

PutResult multipart_upload(S3Client::Impl& client, const std::string& bucket,
                           const std::string& key, std::string_view data,
                           const PutOptions& options) {
  S3Call create{"CreateMultipartUpload",
                "POST",
                bucket,
                key,
                {{"uploads", ""}},
                {{"Content-Type", options.content_type}}};
  const std::string upload_id = upload_id_of(client.options, create, client.execute(create));
  try {
    const size_t part_size = client.options.part_size;
    std::string complete = "<CompleteMultipartUpload>";
    int part = 0;
    for (size_t offset = 0; offset < data.size() || part == 0; offset += part_size) {
      ++part;
      std::string_view slice = data.substr(offset, part_size);
      S3Call upload{"UploadPart",
                    "PUT",
                    bucket,
                    key,
                    {{"partNumber", std::to_string(part)}, {"uploadId", upload_id}},
                    {{"Content-MD5", md5_base64(slice)}},
                    slice};
      HttpResponse response = client.execute(upload);
      const std::string etag = response.header("etag");
      if (etag.empty()) {
        throw ObjectStoreError(
            cat("S3 UploadPart s3://", bucket, "/", key, " part ", part,
                ": no ETag in the answer; fix: point AWS_ENDPOINT_URL_S3 at an S3 API"),
            response.status, "", bucket, key);
      }
      complete += cat("<Part><PartNumber>", part, "</PartNumber><ETag>", xml_escape(etag),
                      "</ETag></Part>");
    }
    complete += "</CompleteMultipartUpload>";
    S3Call finish{"CompleteMultipartUpload",
                  "POST",
                  bucket,
                  key,
                  {{"uploadId", upload_id}},
                  {{"Content-Type", "application/xml"}},
                  complete};
    if (options.if_none_match) finish.headers.emplace_back("If-None-Match", "*");
    HttpResponse response = client.execute(finish);
    // S3 may answer 200 and report the failure in the body.
    auto xml = parse_xml(response.body);
    if (xml && xml->name == "Error") {
      throw ObjectStoreError(
          cat("S3 CompleteMultipartUpload s3://", bucket, "/", key, ": ",
              printable(xml->child_text("Code")), ": ", printable(xml->child_text("Message"), 200),
              "; fix: retry the upload"),
          response.status, xml->child_text("Code"), bucket, key);
    }
    std::string etag = xml ? xml->child_text("ETag") : "";
    if (etag.empty()) etag = response.header("etag");
    return {etag, part};
  } catch (...) {
    try {
      client.execute({"AbortMultipartUpload", "DELETE", bucket, key, {{"uploadId", upload_id}}});
    } catch (const std::exception&) {
      // The first failure is the one to report; S3's lifecycle rules
      // (AbortIncompleteMultipartUpload) clean what an abort could not.
    }
    throw;
  }
}

}  // namespace dtrain::objstore
