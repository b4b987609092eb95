# The image pipeline's tests (issue 5); included by tests/data/CMakeLists.txt.
find_library(DTRAIN_LIBJPEG NAMES jpeg REQUIRED)  # reference decoder in the fixtures
dtrain_test(test_image
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/image_fixtures.cpp
    ${CMAKE_CURRENT_LIST_DIR}/image_decode_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/image_dataset_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/image_loader_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/image_prepare_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/image_resnet_test.cpp
  DEPS dtrain_data dtrain_models
  LABELS "unit;data")
target_link_libraries(test_image PRIVATE ${DTRAIN_LIBJPEG})
target_include_directories(test_image PRIVATE ${CMAKE_CURRENT_LIST_DIR})
