//===- DataLoaderTest.cpp - ImageFolder, the global sampler, the threaded loader ===//
#include "DataTestUtil.h"

#include "kernels/Tensor.h"
#include "runtime/data/ImageFolder.h"
#include "runtime/data/Loader.h"
#include "runtime/data/Sampler.h"

#include "tests/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <set>

using namespace cpc;
using cpc::test::errorOf;
using namespace cpc::data;
using namespace cpc::data::test;
namespace fs = std::filesystem;

namespace {

// DIR/<class>/<n images>: `classes` classes of `perClass` small images, JPEG and PNG mixed.
void makeDataset(const ScratchDir &dir, int classes, int perClass, int width = 48, int height = 40) {
  for (int c = 0; c < classes; ++c) {
    fs::create_directories(dir.path / ("class" + std::to_string(c)));
    for (int i = 0; i < perClass; ++i) {
      std::string name = "class" + std::to_string(c) + "/img" + std::to_string(i);
      RgbImage image = gradientImage(width + i, height + c, c * 100 + i);
      if (i % 2)
        writePng(dir / (name + ".png"), image);
      else
        writeJpeg(dir / (name + ".jpg"), image, 90);
    }
  }
}

//===--- ImageFolder ----------------------------------------------------------===//

// Tests torchvision's ordering: classes sorted, files sorted, nested directories after their
// parent's files, symlinks followed, hidden entries and other extensions skipped.
TEST(DataFolderTest, ScansLikeTorchvision) {
  ScratchDir dir;
  for (const char *d : {"b", "a", "a/sub", ".hidden", "c", "z"})
    fs::create_directories(dir.path / d);
  for (const char *f : {"b/2.JPEG", "b/1.png", "a/x.jpg", "a/sub/y.PNG", "a/.secret.jpg", "a/notes.txt",
                        ".hidden/h.jpg", "c/c.jpeg", "z/readme"})
    writeBytes(dir / f, reinterpret_cast<const uint8_t *>("x"), 1);
  fs::create_symlink(dir.path / "c", dir.path / "a" / "link");
  ImageFolder folder(dir.path.string());
  EXPECT_EQ(folder.classes(), (std::vector<std::string>{"a", "b", "c", "z"}));
  std::vector<std::pair<std::string, int64_t>> got;
  for (const ImageSample &s : folder.samples())
    got.emplace_back(fs::path(s.path).lexically_relative(dir.path).string(), s.label);
  std::vector<std::pair<std::string, int64_t>> want = {
      {"a/x.jpg", 0}, {"a/link/c.jpeg", 0}, {"a/sub/y.PNG", 0}, {"b/1.png", 1}, {"b/2.JPEG", 1}, {"c/c.jpeg", 2}};
  EXPECT_EQ(got, want);
  EXPECT_TRUE(hasImageExtension("X.JpEg"));
  EXPECT_FALSE(hasImageExtension("x.gif"));
}

// Tests one-line errors naming DIR for a missing directory, no classes and no images.
TEST(DataFolderTest, MissingOrEmptyDirectoryThrowsNamingIt) {
  ScratchDir dir;
  std::string missing = dir / "nope";
  EXPECT_EQ(errorOf([&] { ImageFolder f(missing); }), missing + ": no such directory (expected DIR/<class>/<images>)");
  EXPECT_EQ(errorOf([&] { ImageFolder f(dir.path.string()); }),
            dir.path.string() + ": no class directories (expected DIR/<class>/<images>)");
  fs::create_directories(dir.path / "cls");
  EXPECT_EQ(errorOf([&] { ImageFolder f(dir.path.string()); }),
            dir.path.string() + ": no .jpg, .jpeg or .png images in its 1 class directories");
}

//===--- GlobalSampler --------------------------------------------------------===//

// Tests that an epoch's order is a permutation, that epochs and seeds differ, and that it is
// reproducible.
TEST(DataSamplerTest, EpochOrdersArePermutations) {
  std::vector<int64_t> e0 = epochOrder(1000, 3, 0), e1 = epochOrder(1000, 3, 1);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i)
    ASSERT_EQ(sorted[i], i);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, epochOrder(1000, 4, 0));
  EXPECT_EQ(e0, epochOrder(1000, 3, 0));
}

// Tests drop_last stepping across epochs: N = 10, B = 3 gives 3 steps per epoch, 9 distinct
// samples each, and step 3 is epoch 1's first.
TEST(DataSamplerTest, StepsMapToEpochsDroppingTheLastPartialBatch) {
  GlobalSampler sampler(10, 3, 9);
  EXPECT_EQ(sampler.stepsPerEpoch(), 3);
  EXPECT_EQ(sampler.epochOf(3), 1);
  EXPECT_EQ(sampler.stepInEpoch(4), 1);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order = epochOrder(10, 9, epoch);
    std::set<int64_t> seen;
    for (int s = 0; s < 3; ++s) {
      std::vector<int64_t> rows = sampler.rows(epoch * 3 + s, 0, 3);
      EXPECT_EQ(rows, std::vector<int64_t>(order.begin() + s * 3, order.begin() + s * 3 + 3));
      seen.insert(rows.begin(), rows.end());
    }
    EXPECT_EQ(seen.size(), 9u);
  }
  EXPECT_NE(errorOf([] { GlobalSampler s(5, 8, 0); }).find("5 samples are fewer than one global batch of 8"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { sampler.rows(0, 2, 4); }), "");
}

// Tests that the row ranges of one step, in any split, concatenate to its global batch.
TEST(DataSamplerTest, RowRangesConcatenateToTheGlobalBatch) {
  GlobalSampler sampler(100, 12, 1);
  for (int64_t step : {0, 7, 8, 20}) {
    std::vector<int64_t> whole = sampler.rows(step, 0, 12);
    for (int parts : {2, 3, 4}) {
      std::vector<int64_t> joined;
      for (int p = 0; p < parts; ++p) {
        std::vector<int64_t> part = sampler.rows(step, p * 12 / parts, (p + 1) * 12 / parts);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      EXPECT_EQ(joined, whole) << "step " << step << " in " << parts;
    }
  }
}

// Tests issue 33's acceptance as two data-parallel ranks see it: within an epoch their samples
// are disjoint and together they are the dataset (drop_last: 100 samples, 8 steps of 12, the 4
// left over are the epoch's last permutation entries).
TEST(DataSamplerTest, TwoRanksReadDisjointSamplesWhoseUnionIsTheEpoch) {
  GlobalSampler sampler(100, 12, 5);
  for (int64_t epoch : {0, 1}) {
    std::set<int64_t> rank0, rank1;
    for (int64_t step = epoch * 8; step < (epoch + 1) * 8; ++step) {
      for (int64_t i : sampler.rows(step, 0, 6))
        EXPECT_TRUE(rank0.insert(i).second) << "rank 0 reads " << i << " twice in epoch " << epoch;
      for (int64_t i : sampler.rows(step, 6, 12))
        EXPECT_TRUE(rank1.insert(i).second) << "rank 1 reads " << i << " twice in epoch " << epoch;
    }
    for (int64_t i : rank0)
      EXPECT_EQ(rank1.count(i), 0u) << "both ranks read " << i;
    EXPECT_EQ(rank0.size() + rank1.size(), 96u);
  }
}

//===--- ImageLoader ----------------------------------------------------------===//

std::vector<Batch> readSteps(ImageLoader &loader, int steps) {
  std::vector<Batch> batches;
  for (int i = 0; i < steps; ++i)
    batches.push_back(loader.next());
  return batches;
}

// Tests that batches do not depend on the thread count, and cross the epoch boundary.
TEST(DataLoaderTest, SameBatchesWithOneAndThreeThreads) {
  ScratchDir dir;
  makeDataset(dir, 3, 5);
  ImageFolder folder(dir.path.string());
  ImageLoader one(folder.samples(), 24, 4, 17, 1, 2), three(folder.samples(), 24, 4, 17, 3, 3);
  std::vector<Batch> a = readSteps(one, 5), b = readSteps(three, 5); // 3 steps per epoch
  for (int s = 0; s < 5; ++s) {
    EXPECT_EQ(a[s].step, s);
    EXPECT_EQ(a[s].epoch, s / 3);
    EXPECT_EQ(a[s].shape, (std::vector<int64_t>{4, 3, 24, 24}));
    EXPECT_EQ(a[s].images.size(), size_t(4 * 3 * 24 * 24));
    EXPECT_EQ(a[s].indices, b[s].indices);
    EXPECT_EQ(a[s].labels, b[s].labels);
    EXPECT_EQ(a[s].images, b[s].images) << "step " << s;
    for (size_t r = 0; r < 4; ++r)
      EXPECT_EQ(a[s].labels[r], folder.samples()[a[s].indices[r]].label);
  }
  EXPECT_GE(one.stats().imagesDecoded, 20);
  EXPECT_GT(one.stats().busySeconds, 0);
}

// Tests that two ranks reading half a batch each see exactly the full batch's rows, also when
// they start mid-run (a resume), and that startAt(g) equals stepping from 0 to g.
TEST(DataLoaderTest, HalfBatchesAndResumesMatchTheFullBatch) {
  ScratchDir dir;
  makeDataset(dir, 2, 7);
  ImageFolder folder(dir.path.string());
  ImageLoader full(folder, [] {
    LoaderOptions o;
    o.globalBatch = 6;
    o.seed = 3;
    o.threads = 2;
    o.augment.size = 16;
    return o;
  }());
  std::vector<Batch> whole = readSteps(full, 4);
  ImageLoader low(folder.samples(), 16, 6, 3, 2, 1), high(folder.samples(), 16, 6, 3, 3, 2);
  low.startAt(1, 0, 2);
  high.startAt(1, 2, 6);
  size_t perImage = 3 * 16 * 16;
  for (int s = 1; s < 4; ++s) {
    Batch a = low.next(), b = high.next();
    EXPECT_EQ(a.step, s);
    EXPECT_EQ(b.step, s);
    std::vector<float> joined = a.images;
    joined.insert(joined.end(), b.images.begin(), b.images.end());
    EXPECT_EQ(joined, whole[s].images) << "step " << s;
    EXPECT_EQ(a.shape[0], 2);
    EXPECT_EQ(std::vector<float>(whole[s].images.begin(), whole[s].images.begin() + 2 * perImage), a.images);
  }
  full.startAt(2, 0, 6);
  EXPECT_EQ(full.next().images, whole[2].images);
}

// Tests that a file that fails to decode is rethrown from next() naming it, and the stream goes on.
TEST(DataLoaderTest, DecodeErrorIsRethrownNamingTheFile) {
  ScratchDir dir;
  makeDataset(dir, 1, 4);
  std::string bad = dir / "class0/img1.png";
  writeBytes(bad, reinterpret_cast<const uint8_t *>("garbage"), 7);
  ImageFolder folder(dir.path.string());
  ImageLoader loader(folder.samples(), 16, 4, 0, 2, 2);
  std::string message = errorOf([&] { loader.next(); });
  EXPECT_EQ(message, bad + ": not a JPEG or PNG image (starts with 0x67 0x61)");
  EXPECT_NE(errorOf([&] { loader.next(); }), ""); // every batch holds the bad file (N = B)
  std::vector<ImageSample> good(folder.samples().begin(), folder.samples().begin() + 1);
  ImageLoader ok(good, 16, 1, 0, 1, 1);
  EXPECT_EQ(ok.next().step, 0);
}

// Tests that destroying a loader mid-stream, with workers busy and the queue full, returns promptly.
TEST(DataLoaderTest, DestructorMidStreamDoesNotHang) {
  ScratchDir dir;
  makeDataset(dir, 2, 8, 200, 150);
  ImageFolder folder(dir.path.string());
  auto start = std::chrono::steady_clock::now();
  for (int prefetch : {1, 4}) {
    ImageLoader loader(folder.samples(), 64, 4, 1, 3, prefetch);
    loader.next();
  }
  { ImageLoader never(folder.samples(), 64, 4, 1, 3, 2); } // never started
  {
    ImageLoader started(folder.samples(), 64, 4, 1, 3, 2);
    started.startAt(5, 1, 3);
  } // destroyed before any next()
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
}

// Tests that waitForPrefetch returns once exactly the steps ahead are decoded: after the first
// step and a prefetch of 3, steps 1-3 (12 images) are in and the workers stop there.
TEST(DataLoaderTest, WaitForPrefetchReturnsWhenTheStepsAheadAreDecoded) {
  ScratchDir dir;
  makeDataset(dir, 2, 8);
  ImageFolder folder(dir.path.string());
  ImageLoader loader(folder.samples(), 16, 4, 3, 2, 3);
  loader.waitForPrefetch(); // not started: returns at once
  EXPECT_EQ(loader.stats().imagesDecoded, 0);
  loader.next();
  loader.waitForPrefetch();
  EXPECT_EQ(loader.stats().imagesDecoded, 4 + 3 * 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(loader.stats().imagesDecoded, 4 + 3 * 4); // nothing beyond the prefetch
  EXPECT_EQ(loader.next().step, 1);
}

// Tests option errors.
TEST(DataLoaderTest, BadOptionsThrow) {
  std::vector<ImageSample> samples(4, ImageSample{"x.jpg", 0});
  EXPECT_NE(errorOf([&] { ImageLoader l(samples, 16, 8, 0, 1, 1); }), "");
  EXPECT_NE(errorOf([&] { ImageLoader l(samples, 16, 2, 0, 0, 1); }), "");
  ImageLoader loader(samples, 16, 2, 0, 1, 1);
  EXPECT_NE(errorOf([&] { loader.startAt(0, 1, 3); }), "");
}

// Images per second per thread, decoding and augmenting 224 x 224 from 500 x 375 JPEGs
// (ImageNet's typical size). Run by hand: --gtest_also_run_disabled_tests.
TEST(DataLoaderTest, DISABLED_Throughput) {
  ScratchDir dir;
  for (int i = 0; i < 32; ++i) {
    fs::create_directories(dir.path / "c");
    RgbImage image = gradientImage(500, 375, i);
    for (size_t p = 0; p < image.rgb.size(); ++p) // texture, so the JPEG is not trivially small
      image.rgb[p] = uint8_t(image.rgb[p] + (p * 2654435761u >> 27));
    writeJpeg(dir / ("c/" + std::to_string(i) + ".jpg"), image, 90);
  }
  ImageFolder folder(dir.path.string());
  for (int threads : {1, 2}) {
    ImageLoader loader(folder.samples(), 224, 32, 0, threads, 2);
    auto start = std::chrono::steady_clock::now();
    double waited = 0;
    for (int s = 0; s < 8; ++s)
      waited += loader.next().waitSeconds;
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    LoaderStats stats = loader.stats();
    std::printf("threads %d: %.1f images/s per thread (busy), %.1f images/s wall, waited %.2f s\n", threads,
                stats.imagesDecoded / stats.busySeconds, 8 * 32 / wall, waited);
  }
}

} // namespace
