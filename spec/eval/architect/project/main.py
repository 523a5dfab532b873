import sys


def word_total(path):
    """The number of words in the file at `path`."""
    with open(path) as f:
        return len(f.read().split())


def main(argv):
    print(word_total(argv[1]))


if __name__ == "__main__":
    main(sys.argv)
