# The image pipeline's tests (issue 5); included by tests/data/CMakeLists.txt.
find_library(DTRAIN_LIBJPEG NAMES jpeg REQUIRED)  # reference decoder in the fixtures
dtrain_test(test_image
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/image_fixtures.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_image_decode.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_image_dataset.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_image_loader.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_image_prepare.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_webdataset.cpp
    ${CMAKE_CURRENT_LIST_DIR}/test_fingerprint.cpp
  DEPS dtrain_data
  LABELS "unit;data")
target_link_libraries(test_image PRIVATE ${DTRAIN_LIBJPEG})
target_include_directories(test_image PRIVATE ${CMAKE_CURRENT_LIST_DIR} ${DTRAIN_ROOT}/tests)
