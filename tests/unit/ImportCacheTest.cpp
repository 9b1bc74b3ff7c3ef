// cpc plan's one import per model: a second compile with the same options parses the kept
// import instead of reading the file again, and the BatchNorm groups (the dp degree) key the
// import only where the IR depends on them.
#include "compiler/ImportCache.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace {

const std::string kNodeTests = "/usr/share/libonnx-testdata/data/node/";

std::string printed(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

/// A copy of conformance test `name`'s model that the test may delete.
std::string copyOf(const std::string &name) {
  std::string path = ::testing::TempDir() + "cpc-import-cache-" + name + ".onnx";
  std::filesystem::copy_file(kNodeTests + name + "/model.onnx", path,
                             std::filesystem::copy_options::overwrite_existing);
  return path;
}

TEST(ImportCacheTest, ASecondImportDoesNotReadTheFile) {
  std::string path = copyOf("test_add");
  cpc::ImportCache cache;
  cpc::ImportOptions options;
  mlir::MLIRContext first, second;
  std::string text = printed(*cache.import(first, path, options).module);
  std::remove(path.c_str());
  options.batchStatisticGroups = 2; // no BatchNorm: the same import
  cpc::ImportedModel again = cache.import(second, path, options);
  EXPECT_EQ(printed(*again.module), text);
  EXPECT_FALSE(again.dependsOnBatchStatisticGroups);
  options.randomSeed = 7; // another key: the file is read, and it is gone
  mlir::MLIRContext third;
  EXPECT_ANY_THROW(cache.import(third, path, options));
}

TEST(ImportCacheTest, BatchNormGroupsKeyTheImportsThatReadThem) {
  std::string path = copyOf("test_batchnorm_example_training_mode");
  cpc::ImportCache cache;
  cpc::ImportOptions one, two;
  two.batchStatisticGroups = 2;
  mlir::MLIRContext a, b, c;
  cpc::ImportedModel whole = cache.import(a, path, one);
  EXPECT_TRUE(whole.dependsOnBatchStatisticGroups);
  std::string grouped = printed(*cache.import(b, path, two).module);
  EXPECT_NE(grouped, printed(*whole.module));
  EXPECT_EQ(grouped, printed(*cpc::importOnnxFile(c, path, two).module));
  std::remove(path.c_str());
}

} // namespace
